// Torch-facing launch of kernels/cuda/fused_linear_cuda.h, called by
// kernels/fused_linear.cc for CUDA tensors already checked (x contiguous
// float32, weight contiguous float32 or bfloat16, the optional operands
// contiguous float32 of the right sizes). own_kernel false (above
// CudaFusedLinearMaxRows() rows): cuBLAS's float32 GEMM and tensor ops
// instead, bf16 weights widened (exactly) first; or, for bf16 weights when
// CudaFusedLinearTensorCores() and the shape allows, the tensor-core kernel.
#pragma once

#include <torch/types.h>

#include "kernels/fused_linear.h"

namespace performer::kernels::cuda {

torch::Tensor FusedLinearCuda(const torch::Tensor& x, const torch::Tensor& weight,
                              const FusedLinearOptions& options, bool own_kernel);

}  // namespace performer::kernels::cuda
