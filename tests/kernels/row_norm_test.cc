// kernels::LayerNormRows, ScaleNormRows and SquaredNormRows on the CPU:
// ATen's ops bit for bit
// (the bits models have always had there), any leading shape, gradients kept,
// and clear errors for operands of the wrong size.
#include "kernels/row_norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace performer::kernels {
namespace {

TEST(RowNormTest, LayerNormRowsIsAtenLayerNormBitForBit) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({2, 5, 24});
  const torch::Tensor w = torch::randn({24}), b = torch::randn({24});
  EXPECT_TRUE(torch::equal(LayerNormRows(x, w, b, 1e-5), at::layer_norm(x, {24}, w, b, 1e-5)));
  EXPECT_TRUE(torch::equal(LayerNormRows(x, {}, {}, 1e-3), at::layer_norm(x, {24}, {}, {}, 1e-3)));
}

TEST(RowNormTest, ScaleNormRowsIsTheReferenceExpressionBitForBit) {
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({7, 3, 16});
  x[2][1].zero_();  // the eps clamp: a zero row stays zero
  const torch::Tensor g = torch::full({1}, 1.7);
  const torch::Tensor expected = x / x.norm(2, -1, /*keepdim=*/true).clamp_min(1e-5) * g;
  const torch::Tensor y = ScaleNormRows(x, g, 1e-5);
  EXPECT_EQ(y.sizes(), x.sizes());
  EXPECT_TRUE(torch::equal(y, expected));
  EXPECT_TRUE(torch::equal(y[2][1], torch::zeros({16})));
}

TEST(RowNormTest, SquaredNormRowsIsTheSumOfSquaresBitForBit) {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({4, 3, 19});
  const torch::Tensor y = SquaredNormRows(x);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{4, 3, 1}));
  EXPECT_TRUE(torch::equal(y, (x * x).sum(-1, /*keepdim=*/true)));
}

TEST(RowNormTest, KeepsGradientsOnTheCpu) {
  const torch::Tensor x = torch::randn({3, 8}, torch::requires_grad());
  const torch::Tensor g = torch::ones({1}, torch::requires_grad());
  ScaleNormRows(x, g, 1e-5).sum().backward();
  ASSERT_TRUE(g.grad().defined());
  EXPECT_TRUE(x.grad().defined());
}

TEST(RowNormTest, RefusesOperandsOfTheWrongSize) {
  const torch::Tensor x = torch::randn({3, 8});
  EXPECT_THROW(LayerNormRows(x, torch::ones({7}), {}, 1e-5), c10::Error);
  try {
    ScaleNormRows(x, torch::ones({2}), 1e-5);
    FAIL() << "a two-element g was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("ScaleNormRows: g must have one element"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace performer::kernels
