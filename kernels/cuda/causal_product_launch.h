// Torch-facing launch of the CUDA causal dot product
// (kernels/cuda/causal_product_cuda.h): float32 Q (N,H,L,E), K (N,H,L,E),
// V (N,H,L,M) on one CUDA device -> (N,H,L,M). Called by
// kernels/causal_product.cc for CUDA tensors; inputs are made contiguous
// float32 here.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor CausalDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                   const torch::Tensor& values);

}  // namespace performer::kernels::cuda
