// Torch-facing launch of the CUDA non-causal linear attention
// (kernels/cuda/linear_attention_cuda.h): phi_q (N,H,L,M), phi_k (N,H,S,M),
// v (N,H,S,E) on one CUDA device (shapes checked by
// kernels/linear_attention.cc) -> (N,H,L,E) in v's dtype; computed in
// contiguous float32.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor LinearAttentionCuda(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                  const torch::Tensor& v, double eps);

}  // namespace performer::kernels::cuda
