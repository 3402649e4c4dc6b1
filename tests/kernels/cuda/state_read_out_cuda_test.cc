// kernels::FavorProjectedReadOut and StateReadOut on CUDA (under kernels::
// CudaRowInvariance()): against the formula on the CPU, and a row's bits the
// same among other rows reading one expanded state or each its own.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "kernels/cuda_row_invariance.h"
#include "kernels/state_read_out.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

TEST(StateReadOutCudaTest, FavorFeaturesMatchTheFormulaAndKeepARowsBitsAmongOthers) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  const int64_t rows = 40, heads = 3, d = 32, m = 266, e = 32;
  torch::manual_seed(61);
  const torch::Tensor x = torch::randn({rows, heads, d});
  const torch::Tensor projection_t = torch::randn({d, m}) * std::pow(double(d), -0.25);
  const torch::Tensor keys = torch::rand({rows, heads, 9, m}) + 0.01;
  const torch::Tensor values =
      torch::cat({torch::randn({rows, heads, 9, e}), torch::ones({rows, heads, 9, 1})}, -1);
  const torch::Tensor states = torch::matmul(keys.transpose(-1, -2), values).contiguous();
  const torch::Tensor u = torch::matmul(x, projection_t);
  const torch::Tensor q = torch::exp(u - (x * x).sum(-1, true) * (0.5 / std::sqrt(double(d))) -
                                     std::get<0>(u.max(-1, true))) +
                          1e-4;
  const torch::Tensor n = torch::einsum("rhf,rhfj->rhj", {q, states});
  const torch::Tensor expected = n.narrow(-1, 0, e) / n.narrow(-1, e, 1);
  const torch::Tensor xc = x.cuda(), pc = projection_t.cuda(), sc = states.cuda();
  ASSERT_TRUE(StateReadOutSupported(sc));
  const torch::Tensor all = FavorProjectedReadOut(sc, xc, pc, 1e-4).cpu();
  EXPECT_TRUE(torch::allclose(all, expected, 1e-4, 1e-5))
      << "max |diff| " << (all - expected).abs().max().item<float>();
  for (int64_t count : {1, 7}) {
    EXPECT_TRUE(torch::equal(
        FavorProjectedReadOut(sc.narrow(0, 4, count), xc.narrow(0, 4, count), pc, 1e-4).cpu(),
        all.narrow(0, 4, count)))
        << count << " rows";
  }
  // Every row reading state 0 (a source's summary, expanded).
  const torch::Tensor shared = sc.narrow(0, 0, 1).expand({rows, heads, m, e + 1});
  const torch::Tensor one = FavorProjectedReadOut(shared, xc, pc, 1e-4).cpu();
  EXPECT_TRUE(torch::equal(
      FavorProjectedReadOut(shared.narrow(0, 9, 1), xc.narrow(0, 9, 1), pc, 1e-4).cpu(),
      one.narrow(0, 9, 1)));
  EXPECT_TRUE(torch::equal(one.narrow(0, 0, 1), all.narrow(0, 0, 1)));
}

TEST(StateReadOutCudaTest, GivenFeaturesMatchTheFormulaAndKeepARowsBitsAmongOthers) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  const int64_t rows = 40, heads = 2, m = 160, e = 24;
  torch::manual_seed(62);
  const torch::Tensor q = torch::rand({rows, heads, m}) + 0.01;
  const torch::Tensor keys = torch::rand({rows, heads, 5, m}) + 0.01;
  const torch::Tensor values =
      torch::cat({torch::randn({rows, heads, 5, e}), torch::ones({rows, heads, 5, 1})}, -1);
  const torch::Tensor states = torch::matmul(keys.transpose(-1, -2), values).contiguous();
  const torch::Tensor n = torch::einsum("rhf,rhfj->rhj", {q, states});
  const torch::Tensor expected = n.narrow(-1, 0, e) / n.narrow(-1, e, 1);
  const torch::Tensor qc = q.cuda(), sc = states.cuda();
  const torch::Tensor all = StateReadOut(sc, qc).cpu();
  EXPECT_TRUE(torch::allclose(all, expected, 1e-4, 1e-5))
      << "max |diff| " << (all - expected).abs().max().item<float>();
  for (int64_t count : {1, 7}) {
    EXPECT_TRUE(torch::equal(StateReadOut(sc.narrow(0, 4, count), qc.narrow(0, 4, count)).cpu(),
                             all.narrow(0, 4, count)))
        << count << " rows";
  }
  const torch::Tensor shared = sc.narrow(0, 0, 1).expand({rows, heads, m, e + 1});
  EXPECT_TRUE(torch::equal(StateReadOut(shared, qc).cpu().narrow(0, 0, 1), all.narrow(0, 0, 1)));
}

TEST(StateReadOutCudaTest, IsOnlySupportedUnderRowInvariance) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance off(false);
  EXPECT_FALSE(StateReadOutSupported(torch::rand({2, 1, 4, 3}, torch::kCUDA)));
}

}  // namespace
}  // namespace performer::kernels
