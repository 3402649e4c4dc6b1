// Torch-facing launch of the causal dot product on CUDA: Q (N,H,L,E),
// K (N,H,L,E), V (N,H,L,M) on one CUDA device -> (N,H,L,M) in V's dtype.
// It is the chunkwise prefill (kernels/cuda/causal_linear_prefill_cuda.h)
// in float32 without an initial state, whose tiles and segments handle any
// length and feature count up to the prefill's limits. Called by
// kernels/causal_product.cc for CUDA tensors.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor CausalDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                   const torch::Tensor& values);

}  // namespace performer::kernels::cuda
