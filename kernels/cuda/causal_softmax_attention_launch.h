// Torch-facing launch of the CUDA causal softmax attention (kernels/cuda/
// causal_softmax_attention_cuda.h): tensors checked by kernels/
// causal_softmax_attention.cc, which calls it (queries and last contiguous;
// keys and values with their last two dimensions contiguous).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor CausalSoftmaxAttentionCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                         const torch::Tensor& values, const torch::Tensor& last,
                                         float temp);

}  // namespace performer::kernels::cuda
