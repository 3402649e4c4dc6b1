#include "kernels/skinny_linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/cpu/simd.h"
#include "tests/testing/fixtures.h"

namespace performer::kernels {
namespace {

class SkinnyLinearTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { cpu::simd::ForcePortableForTesting() = GetParam(); }
  void TearDown() override { cpu::simd::ForcePortableForTesting() = false; }
};

TEST_P(SkinnyLinearTest, MatchesTorchLinearForOddShapes) {
  torch::manual_seed(5);
  for (auto [rows, in, out] : {std::tuple<int64_t, int64_t, int64_t>{1, 512, 2048},
                               {5, 13, 7},
                               {32, 64, 9},
                               {4, 3, 1},
                               {64, 40, 130},
                               {2, 8, 4}}) {
    torch::Tensor x = torch::randn({rows, in}), w = torch::randn({out, in}),
                  b = torch::randn({out});
    EXPECT_TENSOR_CLOSE(SkinnyLinear(x, w, b), torch::linear(x, w, b), 1e-4, 1e-5);
    EXPECT_TENSOR_CLOSE(SkinnyLinear(x, w), torch::linear(x, w), 1e-4, 1e-5);
  }
}

TEST_P(SkinnyLinearTest, RowsDoNotDependOnTheirBatch) {
  torch::manual_seed(6);
  torch::Tensor x = torch::randn({7, 100}), w = torch::randn({21, 100});
  torch::Tensor all = SkinnyLinear(x, w);
  for (int64_t r = 0; r < 7; ++r) {
    EXPECT_TRUE(torch::equal(SkinnyLinear(x.narrow(0, r, 1), w), all.narrow(0, r, 1))) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Simd, SkinnyLinearTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("Portable") : std::string("Native");
                         });

TEST(SkinnyLinearChecks, MismatchedShapesAreErrors) {
  EXPECT_THROW(SkinnyLinear(torch::ones({2, 3}), torch::ones({4, 5})), c10::Error);
  EXPECT_THROW(SkinnyLinear(torch::ones({2, 3}), torch::ones({4, 3}), torch::ones({5})),
               c10::Error);
  EXPECT_FALSE(SkinnyLinearSupported(torch::ones({2, 3}, torch::kDouble), torch::ones({4, 3})));
}

}  // namespace
}  // namespace performer::kernels
