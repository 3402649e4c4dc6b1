// One projection of a decode step with the elementwise work around it fused
// in, so that a layer's step is a few launches instead of one per op:
//
//   h = LayerNorm(x; norm_weight, norm_bias, norm_eps)   if norm_weight is defined
//       (x otherwise)
//   y = act(h W^T + bias) + residual                      act: identity or GELU (erf)
//
// x (rows, in) float32; weight (out, in) float32, bfloat16 or int8 (the
// weights of --weight_dtype; int8 with weight_scales (out,
// Int8BlocksPerRow(in)) float32 as kernels/cpu/weight_formats.h stores them);
// bias (out), norm_weight / norm_bias (in) and residual (rows, out) float32,
// each optional. Returns a new contiguous (rows, out) float32 tensor. Sums are
// float32 whatever the weight type.
//
// CPU (kernels/cpu/fused_linear_cpu.cc): kernels/cpu/skinny_linear_cpu.h with
// the layer norm and the epilogue as tensor ops (float32 weights), or
// kernels/cpu/weight_dtype_linear_cpu.h with them in plain loops (bfloat16,
// int8); both give each output the same chain of operations whatever `rows`
// is, a prompt's rows included (the compact kernels beat widening the weights
// for sgemm there: docs/benchmarks.md).
// CUDA (kernels/cuda/fused_linear_cuda.cu): one launch; each warp streams one
// weight row with 16-byte loads against up to 8 rows of x staged (and
// normalised) in shared memory, and applies the epilogue as it stores. Up to
// CudaFusedLinearMaxRows() rows (any number under kernels::
// CudaRowInvariance(), kernels/cuda_row_invariance.h); above it cuBLAS's
// float32 GEMM and tensor ops, which win there (bfloat16 weights widened
// first, which is exact).
// Not differentiable (inference only).
#pragma once

#include <torch/types.h>

namespace performer::kernels {

enum class FusedActivation { kNone, kGelu };

struct FusedLinearOptions {
  torch::Tensor bias;         // (out) or undefined
  torch::Tensor norm_weight;  // (in): LayerNorm of x first when defined
  torch::Tensor norm_bias;    // (in) or undefined
  double norm_eps = 1e-5;
  FusedActivation activation = FusedActivation::kNone;
  torch::Tensor residual;       // (rows, out) or undefined; added after the activation
  torch::Tensor weight_scales;  // (out, Int8BlocksPerRow(in)): required with int8 weights
};

torch::Tensor FusedLinear(const torch::Tensor& x, const torch::Tensor& weight,
                          const FusedLinearOptions& options = {});

// GELU (erf) of each row of x [..., cols] (the fused epilogue's): on the
// CPU a row's bits do not depend on the other rows (ATen's vectorised GELU
// computes a range's tail with another erf, and splits large tensors into
// ranges of its own); tensor ops elsewhere. Not differentiable.
torch::Tensor GeluRows(const torch::Tensor& x);

// True when FusedLinear takes a weight of this dtype on this device (float32,
// bfloat16 or int8 on the CPU; float32 or bfloat16 on CUDA when this build
// compiled kernels/cuda).
bool FusedLinearSupported(const torch::Tensor& weight);

// On CUDA: the number of rows up to which FusedLinear runs its own kernel
// (default kDefaultCudaFusedLinearMaxRows, about where the two measured even
// on an H200: docs/gpu.md); above it cuBLAS. Process-wide, read at every
// call (benchmarks and tests compare the two).
constexpr int64_t kDefaultCudaFusedLinearMaxRows = 32;
void SetCudaFusedLinearMaxRows(int64_t rows);
int64_t CudaFusedLinearMaxRows();

// On CUDA, bfloat16 weights above CudaFusedLinearMaxRows() rows: whether
// FusedLinear runs its own tensor-core kernel instead of widening the
// weights for cuBLAS's float32 GEMM. It splits each (normalised) x into two
// bfloat16 terms, hi + lo (x to about 16 bits), multiplies both by the
// bfloat16 weights with float32 accumulation and applies the epilogue as it
// stores; shapes it does not take (in or out not a multiple of 16, weights
// not 32-byte aligned) keep cuBLAS. Off by default until it has been
// measured on a GPU (docs/gpu.md). Process-wide, read at every call.
void SetCudaFusedLinearTensorCores(bool enabled);
bool CudaFusedLinearTensorCores();

}  // namespace performer::kernels
