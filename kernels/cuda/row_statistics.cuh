// A row's normalisation by the 32 lanes of one warp, in an order fixed by the
// row's length alone (lane l takes elements l, l + 32, ...; the lanes' sums
// meet by WarpSum's butterfly), so a row's bits do not depend on the other
// rows of a launch. The LayerNorm of FusedLinear's prologue and RowNorm's
// kernel (its norms and squared norms) are this code.
#pragma once

#include <cstdint>

#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {

// LayerNorm's statistics of one row of `in` floats: the mean first, then the
// variance about it (the reference's two passes). Every lane gets {mean,
// 1 / sqrt(variance + eps)}.
__device__ __forceinline__ float2 RowStatistics(const float* row, int64_t in, float eps, int lane) {
  float sum = 0.0f;
  for (int64_t i = lane; i < in; i += 32) sum += row[i];
  const float mean = WarpSum(sum) / static_cast<float>(in);
  float squares = 0.0f;
  for (int64_t i = lane; i < in; i += 32) {
    const float d = row[i] - mean;
    squares += d * d;
  }
  return make_float2(mean, rsqrtf(WarpSum(squares) / static_cast<float>(in) + eps));
}

// One element of the LayerNorm of a row whose RowStatistics are `stats`.
__device__ __forceinline__ float LayerNormElement(float v, float2 stats, float weight, float bias) {
  return (v - stats.x) * stats.y * weight + bias;
}

// The sum of squares of one row of `in` floats, with fused multiply-adds in
// each lane's order. Every lane gets it.
__device__ __forceinline__ float RowSquaredNorm(const float* row, int64_t in, int lane) {
  float squares = 0.0f;
  for (int64_t i = lane; i < in; i += 32) squares = __fmaf_rn(row[i], row[i], squares);
  return WarpSum(squares);
}

// ScaleNorm's divisor of one row of `in` floats: max(||row||_2, eps). Every
// lane gets it.
__device__ __forceinline__ float RowScaleNormDivisor(const float* row, int64_t in, float eps,
                                                     int lane) {
  return fmaxf(__fsqrt_rn(RowSquaredNorm(row, in, lane)), eps);
}

}  // namespace performer::kernels::cuda
