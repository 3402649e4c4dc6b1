// Torch-facing launch of the CUDA ring attention (kernels/cuda/
// windowed_ring_attention_cuda.h): contiguous float32 CUDA tensors of one
// device, checked by kernels/windowed_ring_attention.cc, which calls it.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor WindowedRingAttentionCuda(const torch::Tensor& q, const torch::Tensor& k,
                                        const torch::Tensor& v, const torch::Tensor& start,
                                        const torch::Tensor& ring_k, const torch::Tensor& ring_v,
                                        const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace performer::kernels::cuda
