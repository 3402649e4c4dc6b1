#include "kernels/cpu/weight_formats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace performer::kernels::cpu {
namespace {

float FromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

TEST(Bf16Test, RoundsToNearestWithTiesToEven) {
  // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 0x3f81 (odd) and 0x3f82 (even).
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  // Just above and below the halfway point.
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f - 0x1p-20f), 0x3f81);
  EXPECT_EQ(FloatToBf16(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
  // A tie whose rounding carries into the exponent: 0x3fff8000 -> 2.0.
  EXPECT_EQ(FloatToBf16(FromBits(0x3fff8000u)), 0x4000);
  // Exact values are kept.
  EXPECT_EQ(FloatToBf16(1.5f), 0x3fc0);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
}

TEST(Bf16Test, OverflowRoundsToInfinityAndInfinitiesStay) {
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(Bf16Test, NaNStaysNaN) {
  // Payload only in the low 16 bits: truncation alone would give +-inf.
  for (uint32_t bits : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fa00000u, 0xffffffffu}) {
    const uint16_t h = FloatToBf16(FromBits(bits));
    EXPECT_TRUE(std::isnan(Bf16ToFloat(h))) << std::hex << bits;
    EXPECT_EQ(h >> 15, bits >> 31) << "sign of " << std::hex << bits;
  }
}

TEST(Bf16Test, WideningIsExactForEveryValue) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    ASSERT_EQ(bits, h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(FloatToBf16(f), h);
    }
  }
}

TEST(Bf16Test, RoundTripErrorIsAtMostHalfAnUlp) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 10.0f);
  std::vector<float> values(10000);
  for (float& v : values) v = normal(gen);
  std::vector<uint16_t> h(values.size());
  std::vector<float> back(values.size());
  ConvertToBf16(values.data(), static_cast<int64_t>(values.size()), h.data());
  ConvertFromBf16(h.data(), static_cast<int64_t>(h.size()), back.data());
  for (size_t i = 0; i < values.size(); ++i) {
    // 8 significant bits: half an ulp is at most 2^-8 of the value.
    EXPECT_LE(std::fabs(back[i] - values[i]), std::ldexp(std::fabs(values[i]), -8)) << values[i];
  }
}

TEST(Int8Test, BlockMaximumMapsToPlusOrMinus127) {
  constexpr int64_t kIn = 64;
  std::vector<float> w(2 * kIn);
  for (int64_t i = 0; i < 2 * kIn; ++i) w[i] = 0.01f * static_cast<float>(i % 7) - 0.02f;
  w[5] = 3.0f;          // row 0, block 0
  w[40] = -2.0f;        // row 0, block 1
  w[kIn + 31] = 0.5f;   // row 1, block 0
  w[kIn + 32] = -7.0f;  // row 1, block 1
  std::vector<int8_t> q(w.size());
  std::vector<float> scales(2 * Int8BlocksPerRow(kIn));
  ASSERT_TRUE(QuantizeInt8(w.data(), 2, kIn, q.data(), scales.data()));
  EXPECT_EQ(q[5], 127);
  EXPECT_EQ(q[40], -127);
  EXPECT_EQ(q[kIn + 31], 127);
  EXPECT_EQ(q[kIn + 32], -127);
  EXPECT_FLOAT_EQ(scales[0], 3.0f / 127);
  EXPECT_FLOAT_EQ(scales[1], 2.0f / 127);
  EXPECT_FLOAT_EQ(scales[2], 0.5f / 127);
  EXPECT_FLOAT_EQ(scales[3], 7.0f / 127);
  for (int8_t v : q) EXPECT_GE(v, -127);
}

TEST(Int8Test, RoundsHalvesAwayFromZero) {
  // Scale 1: the block's maximum is 127.
  std::vector<float> w = {127.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 0.49f};
  std::vector<int8_t> q(w.size());
  float scale = 0;
  ASSERT_TRUE(QuantizeInt8(w.data(), 1, static_cast<int64_t>(w.size()), q.data(), &scale));
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(std::vector<int>(q.begin(), q.end()), (std::vector<int>{127, 1, -1, 2, 3, -3, 0}));
}

TEST(Int8Test, ShorterLastBlockHasItsOwnScale) {
  // in = 100: blocks of 32, 32, 32 and 4 columns.
  constexpr int64_t kIn = 100;
  ASSERT_EQ(Int8BlocksPerRow(kIn), 4);
  // The last block's maximum is 127/128: its scale is exactly 1/128.
  std::vector<float> w(kIn, 1.0f);
  w[96] = 63.5f / 128;
  w[97] = -127.0f / 128;
  w[98] = 1.0f / 128;
  w[99] = 0.0f;
  std::vector<int8_t> q(kIn);
  std::vector<float> scales(4);
  ASSERT_TRUE(QuantizeInt8(w.data(), 1, kIn, q.data(), scales.data()));
  EXPECT_EQ(scales[3], 1.0f / 128);
  EXPECT_EQ(std::vector<int>(q.begin() + 96, q.end()), (std::vector<int>{64, -127, 1, 0}));
  EXPECT_FLOAT_EQ(scales[2], 1.0f / 127);
  EXPECT_EQ(q[95], 127);
}

TEST(Int8Test, ZeroBlockHasScaleZero) {
  std::vector<float> w(64, 0.0f);
  w[40] = 1.0f;
  std::vector<int8_t> q(64, 1);
  std::vector<float> scales(2, 1.0f);
  ASSERT_TRUE(QuantizeInt8(w.data(), 1, 64, q.data(), scales.data()));
  EXPECT_EQ(scales[0], 0.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(q[i], 0);
  std::vector<float> back(64);
  DequantizeInt8(q.data(), scales.data(), 1, 64, back.data());
  EXPECT_EQ(back, w);
}

TEST(Int8Test, RoundTripErrorIsAtMostHalfAStep) {
  std::mt19937 gen(2);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (int64_t in : {32, 96, 100, 512}) {
    constexpr int64_t kOut = 7;
    std::vector<float> w(kOut * in);
    for (float& v : w) v = normal(gen);
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(kOut * Int8BlocksPerRow(in));
    ASSERT_TRUE(QuantizeInt8(w.data(), kOut, in, q.data(), scales.data()));
    std::vector<float> back(w.size());
    DequantizeInt8(q.data(), scales.data(), kOut, in, back.data());
    for (int64_t o = 0; o < kOut; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        const float step = scales[o * Int8BlocksPerRow(in) + i / kInt8BlockSize];
        // Half a step, plus the float rounding of w / scale and q * scale.
        EXPECT_LE(std::fabs(back[o * in + i] - w[o * in + i]), step * 0.50001f + 1e-9f)
            << "in " << in << " o " << o << " i " << i;
      }
    }
  }
}

TEST(Int8Test, NonFiniteWeightsAreRefused) {
  std::vector<int8_t> q(32);
  std::vector<float> scales(1);
  for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    std::vector<float> w(32, 1.0f);
    w[17] = bad;
    EXPECT_FALSE(QuantizeInt8(w.data(), 1, 32, q.data(), scales.data())) << bad;
  }
}

}  // namespace
}  // namespace performer::kernels::cpu
