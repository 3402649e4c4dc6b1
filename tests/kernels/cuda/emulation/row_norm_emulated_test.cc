// The row norm kernel of kernels/cuda/row_norm_cuda.cu run on the host
// (cuda_emulation.h): LayerNorm, ScaleNorm and the squared norm against
// ATen's ops, a row's bits the same among 1 to 37 rows, and its refusals.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

// Rows [first, first + count) of x through the emulated kernel.
torch::Tensor Emulated(emulated::RowNormArgs a, const torch::Tensor& x, int64_t first,
                       int64_t count) {
  const torch::Tensor rows = x.narrow(0, first, count).contiguous();
  torch::Tensor y = a.kind == emulated::RowNormKind::kSquaredNorm ? torch::empty({count, 1})
                                                                  : torch::empty_like(rows);
  a.x = rows.data_ptr<float>();
  a.y = y.data_ptr<float>();
  a.rows = count;
  a.cols = x.size(1);
  const char* error = emulated::RowNormForward(a, nullptr);
  EXPECT_EQ(error, nullptr) << error;
  return y;
}

class RowNormEmulationTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(RowNormEmulationTest, MatchesAtenAndKeepsARowsBitsAmongOthers) {
  const int64_t cols = GetParam(), rows = 37;
  torch::manual_seed(23);
  torch::Tensor x = torch::randn({rows, cols}) * 2 + 0.5;
  x[11].zero_();  // ScaleNorm's eps clamp; LayerNorm's eps alone
  const torch::Tensor w = torch::randn({cols}), b = torch::randn({cols});
  const torch::Tensor g = torch::full({1}, 1.3);
  emulated::RowNormArgs layer{};
  layer.kind = emulated::RowNormKind::kLayerNorm;
  layer.weight = w.data_ptr<float>();
  layer.bias = b.data_ptr<float>();
  layer.eps = 1e-5f;
  emulated::RowNormArgs bare = layer;  // no weight, no bias
  bare.weight = nullptr;
  bare.bias = nullptr;
  emulated::RowNormArgs scale{};
  scale.kind = emulated::RowNormKind::kScaleNorm;
  scale.scale = g.data_ptr<float>();
  scale.eps = 1e-5f;
  emulated::RowNormArgs squared{};
  squared.kind = emulated::RowNormKind::kSquaredNorm;
  const torch::Tensor expected[] = {
      at::layer_norm(x, {cols}, w, b, 1e-5), at::layer_norm(x, {cols}, {}, {}, 1e-5),
      x / x.norm(2, -1, /*keepdim=*/true).clamp_min(1e-5) * g, (x * x).sum(-1, /*keepdim=*/true)};
  const emulated::RowNormArgs kinds[] = {layer, bare, scale, squared};
  for (int k = 0; k < 4; ++k) {
    SCOPED_TRACE(k);
    const torch::Tensor all = Emulated(kinds[k], x, 0, rows);
    // The norms' outputs of order 1; ATen's layer norm forms x rstd - mean rstd, whose
    // rounding leaves a few 1e-5 where the kernel's x - mean is exactly 0
    // (a single column).
    EXPECT_TRUE(torch::allclose(all, expected[k], 1e-4, 1e-4))
        << "max |diff| " << (all - expected[k]).abs().max().item<float>();
    for (int64_t count : {1, 2, 5, 9}) {
      EXPECT_TRUE(torch::equal(Emulated(kinds[k], x, 10, count), all.narrow(0, 10, count)))
          << count << " rows";
    }
  }
}

// 1 column, fewer than a warp's lanes, a warp's width and a partial second
// round, and more than 32 rounds.
INSTANTIATE_TEST_SUITE_P(Widths, RowNormEmulationTest, ::testing::Values(1, 16, 32, 45, 1030));

TEST(RowNormEmulationRefusalTest, RefusesEmptyRowsAndAScaleNormWithoutItsScale) {
  emulated::RowNormArgs a{};
  a.rows = 1;
  EXPECT_STREQ(emulated::RowNormForward(a, nullptr), "row norm needs cols >= 1");
  a.cols = 4;
  a.kind = emulated::RowNormKind::kScaleNorm;
  EXPECT_STREQ(emulated::RowNormForward(a, nullptr), "ScaleNorm needs its scale");
}

}  // namespace
}  // namespace performer::kernels
