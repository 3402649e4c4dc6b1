// simd::ExpAvx2 against exp in double precision: within 2 ulp from -87 to
// 88, the clamped ends, NaN, and a lane's bits whatever its neighbours.
#include "kernels/cpu/vector_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace performer::kernels::cpu::simd {
namespace {

#if PERFORMER_SIMD_HAVE_AVX2
PERFORMER_SIMD_TARGET_AVX2 void ExpOfEight(const float* x, float* out) {
  _mm256_storeu_ps(out, ExpAvx2(_mm256_loadu_ps(x)));
}

TEST(VectorExpTest, WithinTwoUlpOfStdExp) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "the CPU has no AVX2+FMA";
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> uniform(-87.0f, 88.0f);
  double worst = 0.0;
  float x[8], out[8];
  for (int i = 0; i < 200000; ++i) {
    for (float& v : x) v = i < 1000 ? uniform(gen) * 1e-3f : uniform(gen);
    ExpOfEight(x, out);
    for (int l = 0; l < 8; ++l) {
      const double exact = std::exp(static_cast<double>(x[l]));
      const double ulp =
          std::nextafter(static_cast<float>(exact), 1e30f) - static_cast<float>(exact);
      worst = std::max(worst, std::abs(out[l] - exact) / ulp);
    }
  }
  EXPECT_LE(worst, 2.0);
}

TEST(VectorExpTest, EndsAndNaN) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "the CPU has no AVX2+FMA";
  const float inf = std::numeric_limits<float>::infinity();
  const float x[8] = {0.0f, -inf, -1000.0f, -90.0f, 1.0f, std::nanf(""), 1000.0f, -0.0f};
  float out[8];
  ExpOfEight(x, out);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_NEAR(out[1], std::exp(-87.5f), 1e-44f);
  EXPECT_EQ(out[2], out[1]);
  EXPECT_EQ(out[3], out[1]);
  EXPECT_NEAR(out[4], std::exp(1.0f), 1e-6f);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_NEAR(out[6], std::exp(88.0f), 1e32f);
  EXPECT_EQ(out[7], 1.0f);
}

TEST(VectorExpTest, ALanesBitsDoNotDependOnTheOthers) {
  if (!CpuHasAvx2Fma()) GTEST_SKIP() << "the CPU has no AVX2+FMA";
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> uniform(-30.0f, 30.0f);
  float x[8], y[8], out_x[8], out_y[8];
  for (int i = 0; i < 1000; ++i) {
    for (int l = 0; l < 8; ++l) x[l] = uniform(gen), y[l] = uniform(gen);
    ExpOfEight(x, out_x);
    const int l = i % 8;
    y[l] = x[l];
    ExpOfEight(y, out_y);
    EXPECT_EQ(out_x[l], out_y[l]);
  }
}
#endif

}  // namespace
}  // namespace performer::kernels::cpu::simd
