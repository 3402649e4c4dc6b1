// CPU implementation of kernels/windowed_ring_attention.h: contiguous
// float32 CPU tensors, checked by the caller. The threads split (sequence,
// head) pairs, never a pair's tokens.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

torch::Tensor WindowedRingAttentionForward(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& start,
                                           const torch::Tensor& ring_k, const torch::Tensor& ring_v,
                                           const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace performer::kernels::cpu
