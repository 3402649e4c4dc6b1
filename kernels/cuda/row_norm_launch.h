// Torch-facing launch of the CUDA row norms (kernels/cuda/row_norm_cuda.h):
// contiguous float32 CUDA tensors of one device, x (rows, cols), checked by
// kernels/row_norm.cc, which calls it. weight and bias may be undefined.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor LayerNormRowsCuda(const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias, double eps);
torch::Tensor ScaleNormRowsCuda(const torch::Tensor& x, const torch::Tensor& scale, double eps);
// (rows, 1).
torch::Tensor SquaredNormRowsCuda(const torch::Tensor& x);

}  // namespace performer::kernels::cuda
