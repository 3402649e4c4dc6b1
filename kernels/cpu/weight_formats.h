// Compact weight formats for the CPU decode projections
// (kernels/cpu/weight_dtype_linear_cpu.h), and their conversions from
// float32. Decoding one sequence reads every weight once per token, so its
// step time is bound by the weight bytes: bf16 halves them, int8 with block
// scales brings them to 1.125 bytes a weight.
//
// bf16: the upper 16 bits of an IEEE float32 (sign, 8 exponent bits, 7
//   mantissa bits), stored as uint16_t. Widening back is exact.
// int8, block 32: a weight matrix W (out, in), row-major, becomes
//   q (out, in) int8, row-major, the same layout as W, and
//   scales (out, Int8BlocksPerRow(in)) float32, row-major,
//   where block b of row o is columns [32 b, min(32 b + 32, in)): when `in` is
//   not a multiple of 32 the last block of each row is shorter (nothing is
//   padded, so q has exactly out * in bytes and rows stay contiguous).
//   W[o, i] ~ q[o, i] * scales[o, i / 32]. Symmetric (no zero point), like
//   llama.cpp's Q8_0 but with a float32 scale.
//
// No torch here: these run at load time on raw arrays.
#pragma once

#include <cstdint>

namespace performer::kernels::cpu {

// Float32 -> bf16, rounding to nearest, ties to even (the mantissa's 16
// dropped bits). Overflow rounds to +-inf, as IEEE rounding does; a NaN stays
// a NaN (made quiet, sign and leading payload bits kept), which plain
// rounding could turn into an infinity.
uint16_t FloatToBf16(float value);
// Exact.
float Bf16ToFloat(uint16_t value);

// dst[i] = FloatToBf16(src[i]) for i < n.
void ConvertToBf16(const float* src, int64_t n, uint16_t* dst);
// dst[i] = Bf16ToFloat(src[i]) for i < n.
void ConvertFromBf16(const uint16_t* src, int64_t n, float* dst);

constexpr int64_t kInt8BlockSize = 32;

constexpr int64_t Int8BlocksPerRow(int64_t in) {
  return (in + kInt8BlockSize - 1) / kInt8BlockSize;
}

// Quantizes w (out, in) into q (out, in) and scales (out,
// Int8BlocksPerRow(in)): per block, scale = max |w| / 127 and
// q = round(w / scale) (halves away from zero) clamped to [-127, 127]: the
// block's largest magnitude maps to +-127, and the range is symmetric (-128
// is never used). A block of zeros, or one whose scale underflows to 0, gets
// scale 0 and q 0. Returns false, with q and scales unspecified, when a
// weight is not finite: an infinite scale would turn the block into NaNs.
[[nodiscard]] bool QuantizeInt8(const float* w, int64_t out, int64_t in, int8_t* q, float* scales);

// w[o, i] = q[o, i] * scales[o, i / 32]: the weights the int8 kernels compute
// with.
void DequantizeInt8(const int8_t* q, const float* scales, int64_t out, int64_t in, float* w);

}  // namespace performer::kernels::cpu
