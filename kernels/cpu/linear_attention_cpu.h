// CPU implementation of kernels/linear_attention.h: three batched matmuls
// (BLAS) and a reduction, so autograd differentiates it. Inputs already
// validated (shapes, one device); any strides.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

torch::Tensor LinearAttentionForward(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                     const torch::Tensor& v, double eps);

}  // namespace performer::kernels::cpu
