// The norms of a model's layers on each row of x [..., cols] for inference:
//
//   LayerNormRows:   (x - mean) / sqrt(var + eps) * weight + bias  (weight
//                    and bias optional: 1 and 0)
//   ScaleNormRows:   x / max(||x||_2, eps) * g                   (g one element)
//   SquaredNormRows: ||x||_2^2, the last dimension kept (size 1): the
//                    squared norm of fast-transformers' Favor features
//
// Returns a new tensor of x's shape (the last dimension 1 for
// SquaredNormRows; float32 under the CUDA kernel, x's dtype otherwise).
// CPU, and CUDA outside kernels::CudaRowInvariance(): ATen's ops
// (at::layer_norm; x / x.norm(2, -1).clamp_min(eps) * g; (x * x).sum(-1)),
// the bits models have always had there. On the CPU those compute each row alone whatever the
// others. On CUDA ATen does not promise it (its reductions choose how to
// split a row from the number of rows), so under kernels::
// CudaRowInvariance() float32 rows run kernels/cuda/row_norm_cuda.cu: a warp
// per row in an order fixed by `cols`, the statistics of FusedLinear's
// LayerNorm (kernels/cuda/row_statistics.cuh). That kernel has no backward:
// under grad mode, with an input that requires a gradient, ATen's ops run.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor LayerNormRows(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, double eps);
torch::Tensor ScaleNormRows(const torch::Tensor& x, const torch::Tensor& g, double eps);
torch::Tensor SquaredNormRows(const torch::Tensor& x);

}  // namespace performer::kernels
