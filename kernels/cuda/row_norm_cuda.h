// CUDA kernel of kernels/row_norm.h, raw pointers + shapes in (contiguous
// float32 device buffers):
//
//   kLayerNorm:   y = (x - mean) / sqrt(var + eps) * weight + bias
//   kScaleNorm:   y = x / max(||x||_2, eps) * scale[0]
//   kSquaredNorm: y = ||x||_2^2, one float per row (y is (rows, 1))
//
// for each row of x (rows, cols). A warp per row, four rows per block of 128
// threads, each row reduced as kernels/cuda/row_statistics.cuh does (lane l
// takes elements l, l + 32, ...), so a row's bits depend on its own values
// and `cols` alone. weight and bias may be null (1 and 0); scale (one
// element, on the device) is read by kScaleNorm only. y may not alias x.
// Returns a CUDA error string or nullptr.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

enum class RowNormKind : int { kLayerNorm = 0, kScaleNorm = 1, kSquaredNorm = 2 };

struct RowNormArgs {
  RowNormKind kind;
  const float* x;       // [rows, cols]
  const float* weight;  // [cols] or null (kLayerNorm)
  const float* bias;    // [cols] or null (kLayerNorm)
  const float* scale;   // [1] (kScaleNorm)
  float eps;
  float* y;  // [rows, cols]; [rows, 1] for kSquaredNorm
  int64_t rows, cols;
};

const char* RowNormForward(const RowNormArgs& args, void* stream);

}  // namespace performer::kernels::cuda
