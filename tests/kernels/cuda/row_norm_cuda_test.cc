// kernels::LayerNormRows, ScaleNormRows and SquaredNormRows on CUDA under kernels::
// CudaRowInvariance() (kernels/cuda/row_norm_cuda.cu): against the CPU, and a
// row's bits the same among 1 to 300 rows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/cuda_row_invariance.h"
#include "kernels/row_norm.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

class RowNormCudaTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(RowNormCudaTest, MatchesTheCpuAndKeepsARowsBitsAmongOthers) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  const torch::NoGradGuard no_grad;
  const int64_t cols = GetParam();
  torch::manual_seed(17);
  const torch::Tensor x = torch::randn({300, cols}) * 3 + 1;
  const torch::Tensor w = torch::randn({cols}), b = torch::randn({cols});
  const torch::Tensor g = torch::full({1}, 0.8);
  const torch::Tensor xc = x.cuda(), wc = w.cuda(), bc = b.cuda(), gc = g.cuda();
  const torch::Tensor layer = LayerNormRows(xc, wc, bc, 1e-5).cpu();
  const torch::Tensor scale = ScaleNormRows(xc, gc, 1e-5).cpu();
  const torch::Tensor squared = SquaredNormRows(xc).cpu();
  EXPECT_TRUE(torch::allclose(layer, LayerNormRows(x, w, b, 1e-5), 1e-4, 1e-4));
  EXPECT_TRUE(torch::allclose(scale, ScaleNormRows(x, g, 1e-5), 1e-5, 1e-6));
  EXPECT_EQ(squared.sizes(), (std::vector<int64_t>{300, 1}));
  EXPECT_TRUE(torch::allclose(squared, SquaredNormRows(x), 1e-5, 1e-5));
  for (int64_t rows : {1, 2, 7, 33}) {
    const torch::Tensor part = xc.narrow(0, 5, rows);
    EXPECT_TRUE(torch::equal(LayerNormRows(part, wc, bc, 1e-5).cpu(), layer.narrow(0, 5, rows)))
        << rows << " rows";
    EXPECT_TRUE(torch::equal(ScaleNormRows(part, gc, 1e-5).cpu(), scale.narrow(0, 5, rows)))
        << rows << " rows";
    EXPECT_TRUE(torch::equal(SquaredNormRows(part).cpu(), squared.narrow(0, 5, rows)))
        << rows << " rows";
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, RowNormCudaTest, ::testing::Values(1, 16, 45, 512, 1030));

}  // namespace
}  // namespace performer::kernels
