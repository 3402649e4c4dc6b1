// CUDA kernel of kernels/fused_linear.h, raw pointers + shapes in:
//
//   h = LayerNorm(x) if norm_weight (else x);  y = act(h W^T + bias) + residual
//
// x (rows, in), bias (out), norm_weight / norm_bias (in), residual and y
// (rows, out): float32, contiguous; weight (out, in) float32 or bfloat16.
// Optional pointers may be null (norm_bias only beside norm_weight). y may
// alias residual (each element is read, then written, by one thread), not x.
//
// One launch: blocks of kWarpsPerBlock warps, grid (ceil(out / warps),
// ceil(rows / R)) with R in {1, 2, 4, 8} rows of x per block (fewer when a
// row of `in` floats is large). A block stages its R rows of x in shared
// memory, normalises them there (a warp per row, two passes: mean, then
// variance), then each warp streams one weight row, 16 bytes per lane per
// load when the rows are 16-byte aligned (else one element), multiplies it
// against the R rows, reduces across the warp and applies the epilogue. The
// 16-byte loads go in chunks of 8 per lane held in registers, the first
// chunk issued before x is staged, so that a small batch waits about one
// memory latency per chunk.
// Fails (error string) when R = 1 rows of `in` floats exceed the device's
// shared memory per block.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

enum class FusedWeightType : int { kFloat32 = 0, kBFloat16 = 1 };

struct FusedLinearArgs {
  FusedWeightType weight_type;
  const float* x;
  const void* weight;
  const float* bias;
  const float* norm_weight;
  const float* norm_bias;
  float norm_eps;
  bool gelu;
  const float* residual;
  float* y;
  int64_t rows;
  int64_t in;
  int64_t out;
};

// Returns a CUDA error string or nullptr.
const char* FusedLinearForward(const FusedLinearArgs& args, void* stream);

// The same op on tensor cores, for bfloat16 weights (kernels::
// SetCudaFusedLinearTensorCores): each normalised x is split into two
// bfloat16 terms, hi = bf16(x) and lo = bf16(x - hi), and y = act((hi + lo)
// W^T + bias) + residual with float32 accumulation (nvcuda::wmma 16x16x16),
// blocks of 4 warps over tiles of 32 rows x 32 outputs. Needs
// FusedLinearMmaSupported: in and out multiples of 16, weights 32-byte
// aligned. y may alias residual, not x. Returns a CUDA error string or nullptr.
bool FusedLinearMmaSupported(const FusedLinearArgs& args);
const char* FusedLinearMmaForward(const FusedLinearArgs& args, void* stream);

}  // namespace performer::kernels::cuda
