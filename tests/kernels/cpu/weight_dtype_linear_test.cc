#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/weight_dtype_linear_cpu.h"
#include "kernels/cpu/weight_formats.h"

namespace performer::kernels::cpu {
namespace {

// A weight matrix in both formats, with its dequantized float32 values (what
// every path multiplies by, the kAvx512 paths up to rounding x).
struct Weights {
  int64_t out = 0, in = 0;
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q;
  std::vector<float> scales;
  std::vector<float> bf16_values, int8_values;
};

Weights MakeWeights(int64_t out, int64_t in, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 0.1f);
  Weights w;
  w.out = out;
  w.in = in;
  std::vector<float> f(out * in);
  for (float& v : f) v = normal(gen);
  w.bf16.resize(f.size());
  w.bf16_values.resize(f.size());
  ConvertToBf16(f.data(), out * in, w.bf16.data());
  ConvertFromBf16(w.bf16.data(), out * in, w.bf16_values.data());
  w.q.resize(f.size());
  w.scales.resize(out * Int8BlocksPerRow(in));
  w.int8_values.resize(f.size());
  EXPECT_TRUE(QuantizeInt8(f.data(), out, in, w.q.data(), w.scales.data()));
  DequantizeInt8(w.q.data(), w.scales.data(), out, in, w.int8_values.data());
  return w;
}

// Activations whose blocks of 32 differ in magnitude (every other block 30x
// larger), so that per-block scales matter.
std::vector<float> MakeX(int64_t rows, int64_t in, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * in);
  for (int64_t i = 0; i < rows * in; ++i) {
    x[i] = normal(gen) * ((i % in) / 32 % 2 == 1 ? 30.0f : 1.0f);
  }
  return x;
}

void RunLinear(LinearWeights weights, const float* x, const Weights& w, const float* bias, float* y,
               int64_t rows, LinearPath path) {
  if (weights == LinearWeights::kBf16) {
    LinearBf16(x, w.bf16.data(), bias, y, rows, w.in, w.out, path);
  } else {
    LinearInt8(x, w.q.data(), w.scales.data(), bias, y, rows, w.in, w.out, path);
  }
}

std::string MissingIsa(LinearWeights weights, LinearPath path) {
  if (path == LinearPath::kAvx2) return "AVX2 and FMA";
  return weights == LinearWeights::kBf16 ? "AVX-512 F/BW/VL and AVX512_BF16"
                                         : "AVX-512 F/BW/VL and AVX512_VNNI";
}

using PathParam = std::tuple<LinearWeights, LinearPath>;

class WeightDtypeLinearTest : public ::testing::TestWithParam<PathParam> {
 protected:
  void SetUp() override { std::tie(weights_, path_) = GetParam(); }

  // A path this CPU lacks is not skipped (tools/test.sh counts a skipped unit
  // test as a failure, and CPUs without AVX-512 are common): the test checks
  // instead that forcing the path is refused, says which instruction sets are
  // missing, and returns true.
  bool PathMissing() {
    if (LinearPathAvailable(weights_, path_)) return false;
    std::printf("this CPU lacks %s: checking that the %s path is refused\n",
                MissingIsa(weights_, path_).c_str(), LinearPathName(path_));
    std::mt19937 gen(10);
    const Weights w = MakeWeights(4, 32, gen);
    const std::vector<float> x = MakeX(1, 32, gen);
    std::vector<float> y(4);
    EXPECT_THROW(RunLinear(weights_, x.data(), w, nullptr, y.data(), 1, path_), c10::Error);
    return true;
  }

  LinearWeights weights_ = LinearWeights::kBf16;
  LinearPath path_ = LinearPath::kScalar;
};

// x as `path` multiplies it: as is, except on the kAvx512 paths, which round
// it to bf16 (bf16 weights) or quantize it per block of 32 columns with
// scale max |x| / 127 and ties to even (int8 weights), as the header says.
std::vector<double> XAsMultiplied(LinearWeights weights, LinearPath path,
                                  const std::vector<float>& x, int64_t in) {
  std::vector<double> result(x.begin(), x.end());
  if (path != LinearPath::kAvx512) return result;
  if (weights == LinearWeights::kBf16) {
    for (size_t i = 0; i < x.size(); ++i) result[i] = Bf16ToFloat(FloatToBf16(x[i]));
    return result;
  }
  for (size_t row = 0; row < x.size(); row += in) {
    for (int64_t begin = 0; begin < in; begin += 32) {
      const int64_t end = std::min<int64_t>(in, begin + 32);
      float amax = 0.0f;
      for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[row + i]));
      const float scale = amax / 127.0f, inv = scale == 0.0f ? 0.0f : 127.0f / amax;
      for (int64_t i = begin; i < end; ++i) {
        result[row + i] = static_cast<double>(std::nearbyint(x[row + i] * inv)) * scale;
      }
    }
  }
  return result;
}

// Every path against exact sums (in double) with the dequantized weights:
//  - with x as the path multiplies it, to within float32 summation: `in`
//    products and the bias, each path's error at most about
//    (in + 1) 2^-24 sum |x w| (the classic bound, for any order of
//    summation); the tolerance allows twice that;
//  - with x as given, to within the accuracy the header promises: kAvx512
//    with bf16 weights rounds each x to bf16 (relative error <= 2^-8, the
//    products then exact), 2^-8 sum |x w| more; kAvx512 with int8 weights
//    moves each x by at most half its block's step d = max |x| / 127, the
//    sum over blocks of d / 2 sum |w| more.
TEST_P(WeightDtypeLinearTest, MatchesTheDefinitionWithinItsErrorBound) {
  if (PathMissing()) return;
  std::mt19937 gen(7);
  for (int64_t in : {32, 96, 100, 512}) {
    for (int64_t out : {1, 5, 64, 257}) {
      const Weights w = MakeWeights(out, in, gen);
      const std::vector<float>& wv =
          weights_ == LinearWeights::kBf16 ? w.bf16_values : w.int8_values;
      std::vector<float> bias(out);
      for (float& b : bias) b = std::normal_distribution<float>(0.0f, 1.0f)(gen);
      // 1 to 64 rows: decode batches; 150: beyond them (kept to small `out`
      // for time).
      for (int64_t rows : {1, 3, 17, 64, 150}) {
        if (rows > 64 && out > 64) continue;
        const std::vector<float> x = MakeX(rows, in, gen);
        const std::vector<double> xm = XAsMultiplied(weights_, path_, x, in);
        for (bool with_bias : {false, true}) {
          std::vector<float> y(rows * out, std::nanf(""));
          RunLinear(weights_, x.data(), w, with_bias ? bias.data() : nullptr, y.data(), rows,
                    path_);
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t o = 0; o < out; ++o) {
              const float* wr = wv.data() + o * in;
              const double b = with_bias ? bias[o] : 0.0;
              double as_multiplied = b, as_given = b;
              double magnitude = std::fabs(b), magnitude_given = std::fabs(b);
              double x_rounding = 0.0;
              for (int64_t begin = 0; begin < in; begin += 32) {
                double x_max = 0.0, w_sum = 0.0;
                for (int64_t i = begin; i < std::min<int64_t>(in, begin + 32); ++i) {
                  const double xi = x[r * in + i], xmi = xm[r * in + i];
                  as_multiplied += xmi * wr[i];
                  as_given += xi * wr[i];
                  magnitude += std::fabs(xmi * wr[i]);
                  magnitude_given += std::fabs(xi * wr[i]);
                  x_max = std::max(x_max, std::fabs(xi));
                  w_sum += std::fabs(wr[i]);
                }
                x_rounding += x_max / 127.0 / 2.0 * w_sum;
              }
              const double summation = 2.0 * (in + 2) * std::ldexp(magnitude, -24) + 1e-6;
              double accuracy = 2.0 * (in + 2) * std::ldexp(magnitude_given, -24) + 1e-6;
              if (path_ == LinearPath::kAvx512) {
                accuracy += weights_ == LinearWeights::kBf16 ? std::ldexp(magnitude_given, -8)
                                                             : x_rounding * 1.0001;
              }
              const float got = y[r * out + o];
              ASSERT_NEAR(got, as_multiplied, summation)
                  << "rows " << rows << " in " << in << " out " << out << " bias " << with_bias
                  << " at (" << r << ", " << o << ")";
              ASSERT_NEAR(got, as_given, accuracy)
                  << "rows " << rows << " in " << in << " out " << out << " bias " << with_bias
                  << " at (" << r << ", " << o << ")";
            }
          }
        }
      }
    }
  }
}

// The server's exactness: a row's result has the same bits whatever rows
// share the call (alone, in a small group, in a large one).
TEST_P(WeightDtypeLinearTest, RowsDoNotDependOnTheirBatch) {
  if (PathMissing()) return;
  std::mt19937 gen(8);
  constexpr int64_t kRows = 17;
  for (int64_t in : {100, 512}) {
    const Weights w = MakeWeights(37, in, gen);
    const std::vector<float> x = MakeX(kRows, in, gen);
    std::vector<float> all(kRows * w.out);
    RunLinear(weights_, x.data(), w, nullptr, all.data(), kRows, path_);
    for (int64_t begin : {0, 5, 16}) {
      for (int64_t count : {1, 2, 4, 7}) {
        if (begin + count > kRows) continue;
        std::vector<float> part(count * w.out);
        RunLinear(weights_, x.data() + begin * in, w, nullptr, part.data(), count, path_);
        EXPECT_EQ(std::memcmp(part.data(), all.data() + begin * w.out, part.size() * 4), 0)
            << "in " << in << " rows [" << begin << ", " << begin + count << ")";
      }
    }
  }
}

TEST_P(WeightDtypeLinearTest, NoColumnsGivesTheBias) {
  if (PathMissing()) return;
  const float bias[3] = {1.0f, -2.0f, 0.5f};
  const uint16_t no_bf16 = 0;
  const int8_t no_q = 0;
  const float no_scale = 0.0f, no_x = 0.0f;
  std::vector<float> y(2 * 3, std::nanf(""));
  if (weights_ == LinearWeights::kBf16) {
    LinearBf16(&no_x, &no_bf16, bias, y.data(), 2, 0, 3, path_);
  } else {
    LinearInt8(&no_x, &no_q, &no_scale, bias, y.data(), 2, 0, 3, path_);
  }
  EXPECT_EQ(y, (std::vector<float>{1.0f, -2.0f, 0.5f, 1.0f, -2.0f, 0.5f}));
}

INSTANTIATE_TEST_SUITE_P(
    AllPaths, WeightDtypeLinearTest,
    ::testing::Combine(::testing::Values(LinearWeights::kBf16, LinearWeights::kInt8),
                       ::testing::Values(LinearPath::kScalar, LinearPath::kAvx2,
                                         LinearPath::kAvx512)),
    [](const ::testing::TestParamInfo<PathParam>& info) {
      return std::string(std::get<0>(info.param) == LinearWeights::kBf16 ? "Bf16_" : "Int8_") +
             LinearPathName(std::get<1>(info.param));
    });

TEST(WeightDtypeLinearDispatch, AutoRunsTheChosenPath) {
  std::mt19937 gen(9);
  const Weights w = MakeWeights(9, 70, gen);
  const std::vector<float> x = MakeX(5, 70, gen);
  for (LinearWeights weights : {LinearWeights::kBf16, LinearWeights::kInt8}) {
    const LinearPath chosen = ChosenLinearPath(weights);
    EXPECT_TRUE(LinearPathAvailable(weights, chosen));
    EXPECT_NE(chosen, LinearPath::kAuto);
    std::vector<float> y_auto(5 * 9), y_chosen(5 * 9);
    RunLinear(weights, x.data(), w, nullptr, y_auto.data(), 5, LinearPath::kAuto);
    RunLinear(weights, x.data(), w, nullptr, y_chosen.data(), 5, chosen);
    EXPECT_EQ(y_auto, y_chosen) << LinearPathName(chosen);
  }
}

TEST(WeightDtypeLinearDispatch, PathNames) {
  EXPECT_STREQ(LinearPathName(LinearPath::kAuto), "auto");
  EXPECT_STREQ(LinearPathName(LinearPath::kScalar), "scalar");
  EXPECT_STREQ(LinearPathName(LinearPath::kAvx2), "avx2");
  EXPECT_STREQ(LinearPathName(LinearPath::kAvx512), "avx512");
  EXPECT_TRUE(LinearPathAvailable(LinearWeights::kInt8, LinearPath::kScalar));
}

}  // namespace
}  // namespace performer::kernels::cpu
