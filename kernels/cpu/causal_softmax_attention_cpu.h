// CPU implementation of kernels/causal_softmax_attention.h: tensors checked
// by the caller (queries and last contiguous; keys and values with their
// last two dimensions contiguous).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

torch::Tensor CausalSoftmaxAttentionForward(const torch::Tensor& queries, const torch::Tensor& keys,
                                            const torch::Tensor& values, const torch::Tensor& last,
                                            float temp);

}  // namespace performer::kernels::cpu
