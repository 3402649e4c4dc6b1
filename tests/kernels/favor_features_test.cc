#include "kernels/favor_features.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/feature_maps/performer_kernels.h"
#include "tests/testing/fixtures.h"

namespace performer::kernels {
namespace {

// performer-pytorch's softmax_kernel and generalized_kernel (ReLU), written
// out with tensor ops for data (B, H, L, D) and P (M, D).
torch::Tensor ReferenceSoftmax(const torch::Tensor& data, const torch::Tensor& projection,
                               bool is_query, double eps) {
  const double normalizer = std::pow(static_cast<double>(data.size(-1)), -0.25);
  const double ratio = std::pow(static_cast<double>(projection.size(0)), -0.5);
  torch::Tensor data_dash = torch::einsum("bhid,jd->bhij", {normalizer * data, projection});
  torch::Tensor diag = (data * data).sum(-1).div(2.0).mul(normalizer * normalizer).unsqueeze(-1);
  torch::Tensor stabiliser = is_query ? data_dash.amax({-1}, true) : data_dash.amax({-1, -2}, true);
  return ratio * (torch::exp(data_dash - diag - stabiliser) + eps);
}

torch::Tensor ReferenceGeneralized(const torch::Tensor& data, const torch::Tensor& projection,
                                   double eps) {
  const double normalizer = std::pow(static_cast<double>(data.size(-1)), -0.25);
  return torch::relu(torch::einsum("bhid,jd->bhij", {normalizer * data, projection})) + eps;
}

struct FavorShape {
  int64_t b, h, l, d, m;
};

class FavorFeaturesTest : public ::testing::TestWithParam<FavorShape> {};

TEST_P(FavorFeaturesTest, SoftmaxMatchesTheReferenceFormulaInDouble) {
  const FavorShape s = GetParam();
  torch::manual_seed(41);
  const torch::TensorOptions f64 = torch::TensorOptions().dtype(torch::kDouble);
  const torch::Tensor data = torch::randn({s.b, s.h, s.l, s.d}, f64);
  const torch::Tensor projection = torch::randn({s.m, s.d}, f64);
  for (bool is_query : {true, false}) {
    const torch::Tensor got = SoftmaxKernelFeatures(data, projection, is_query);
    ASSERT_EQ(got.scalar_type(), torch::kDouble);
    EXPECT_TENSOR_CLOSE(got, ReferenceSoftmax(data, projection, is_query, 1e-4), 1e-12, 1e-10);
  }
  EXPECT_TENSOR_CLOSE(GeneralizedKernelFeatures(data, projection),
                      ReferenceGeneralized(data, projection, 1e-3), 1e-12, 1e-10);
}

TEST_P(FavorFeaturesTest, Float32MatchesCoreFeatureMaps) {
  const FavorShape s = GetParam();
  torch::manual_seed(42);
  const torch::Tensor data = torch::randn({s.b, s.h, s.l, s.d});
  const torch::Tensor projection = torch::randn({s.m, s.d});
  EXPECT_TENSOR_CLOSE(SoftmaxKernelFeatures(data, projection, /*is_query=*/true),
                      SoftmaxKernelQuery(data, projection), 1e-7, 1e-6);
  EXPECT_TENSOR_CLOSE(SoftmaxKernelFeatures(data, projection, /*is_query=*/false),
                      SoftmaxKernelKey(data, projection), 1e-7, 1e-6);
  EXPECT_TENSOR_CLOSE(GeneralizedKernelFeatures(data, projection),
                      GeneralizedKernel(data, projection, KernelFunction::kReLU), 1e-7, 1e-6);
  // And the explicit formula, computed in double.
  const torch::Tensor expected =
      ReferenceSoftmax(data.to(torch::kDouble), projection.to(torch::kDouble), false, 1e-4);
  EXPECT_TENSOR_CLOSE(SoftmaxKernelFeatures(data, projection, false).to(torch::kDouble), expected,
                      1e-7, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FavorFeaturesTest,
                         ::testing::Values(FavorShape{1, 1, 1, 1, 1}, FavorShape{2, 3, 7, 5, 11},
                                           FavorShape{1, 2, 33, 17, 19},
                                           FavorShape{2, 4, 64, 64, 266}));

TEST(FavorFeaturesTest, KeyStabiliserIsPerSequence) {
  // Scaling one sequence's keys must not change another sequence's features.
  torch::manual_seed(43);
  torch::Tensor data = torch::randn({2, 1, 5, 8});
  const torch::Tensor projection = torch::randn({6, 8});
  const torch::Tensor before = SoftmaxKernelFeatures(data, projection, false);
  data[1].mul_(3.0);
  const torch::Tensor after = SoftmaxKernelFeatures(data, projection, false);
  EXPECT_TENSOR_CLOSE(after[0], before[0], 0, 0);
}

TEST(FavorFeaturesTest, AcceptsOtherLeadingShapesAndHalfTypes) {
  torch::manual_seed(44);
  const torch::Tensor data = torch::randn({3, 4, 8});  // (H, L, D): three sequences
  const torch::Tensor projection = torch::randn({5, 8});
  const torch::Tensor got = SoftmaxKernelFeatures(data, projection, false);
  EXPECT_EQ(got.sizes(), torch::IntArrayRef({3, 4, 5}));
  EXPECT_TENSOR_CLOSE(got, ReferenceSoftmax(data.unsqueeze(0), projection, false, 1e-4)[0], 1e-7,
                      1e-5);
  const torch::Tensor half = SoftmaxKernelFeatures(data.to(torch::kBFloat16), projection, true);
  EXPECT_EQ(half.scalar_type(), torch::kBFloat16);
}

TEST(FavorFeaturesTest, BadShapesAreErrors) {
  EXPECT_THROW(SoftmaxKernelFeatures(torch::randn({2, 3, 4}), torch::randn({5, 3}), true),
               c10::Error);
  EXPECT_THROW(GeneralizedKernelFeatures(torch::randn({4}), torch::randn({5, 4})), c10::Error);
  EXPECT_THROW(
      SoftmaxKernelFeatures(torch::ones({2, 3, 4}, torch::kLong), torch::randn({5, 4}), true),
      c10::Error);
}

}  // namespace
}  // namespace performer::kernels
