#include "kernels/cpu/weight_formats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace performer::kernels::cpu {

uint16_t FloatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    // Truncating could clear every payload bit left and make an infinity;
    // setting the quiet bit keeps it a NaN.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Adding 0x7fff rounds up above the halfway point; the kept bit's parity
  // (0 or 1 more) breaks a tie towards the even result. A carry into the
  // exponent is the correct rounding (up to +-inf past the largest bf16).
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

void ConvertToBf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(src[i]);
}

void ConvertFromBf16(const uint16_t* src, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(src[i]);
}

bool QuantizeInt8(const float* w, int64_t out, int64_t in, int8_t* q, float* scales) {
  const int64_t blocks = Int8BlocksPerRow(in);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = b * kInt8BlockSize, end = std::min(begin + kInt8BlockSize, in);
      const float* row = w + o * in;
      float amax = 0.0f;
      for (int64_t i = begin; i < end; ++i) {
        if (!std::isfinite(row[i])) return false;
        amax = std::max(amax, std::fabs(row[i]));
      }
      const float scale = amax / 127.0f;
      scales[o * blocks + b] = scale;
      for (int64_t i = begin; i < end; ++i) {
        // For the largest magnitude w / scale is 127 within rounding, so it
        // rounds to +-127; the clamp bounds the ratios of a subnormal scale,
        // which has lost precision.
        const float v = scale == 0.0f ? 0.0f : std::round(row[i] / scale);
        q[o * in + i] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
      }
    }
  }
  return true;
}

void DequantizeInt8(const int8_t* q, const float* scales, int64_t out, int64_t in, float* w) {
  const int64_t blocks = Int8BlocksPerRow(in);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      w[o * in + i] = static_cast<float>(q[o * in + i]) * scales[o * blocks + i / kInt8BlockSize];
    }
  }
}

}  // namespace performer::kernels::cpu
