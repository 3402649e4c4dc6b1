// CUDA causal dot product against the CPU kernel (its reference).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/causal_product.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

struct Shape {
  int64_t n, h, l, e, m;
};

class CausalDotProductCudaTest : public ::testing::TestWithParam<Shape> {};

TEST_P(CausalDotProductCudaTest, MatchesCpuKernel) {
  PERFORMER_REQUIRE_CUDA();
  const Shape s = GetParam();
  torch::manual_seed(7);
  const torch::Tensor q = torch::randn({s.n, s.h, s.l, s.e});
  const torch::Tensor k = torch::randn({s.n, s.h, s.l, s.e});
  const torch::Tensor v = torch::randn({s.n, s.h, s.l, s.m});
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = CausalDotProduct(q, k, v);
  const torch::Tensor got = CausalDotProduct(q.cuda(), k.cuda(), v.cuda()).cpu();
  // float32 sums in another order: the error grows with the output's scale
  // (about 300 at M = 256, L = 300), so it is bounded relative to it.
  const double scale = expected.numel() > 0 ? expected.abs().max().item<double>() : 0.0;
  const double error = expected.numel() > 0 ? (got - expected).abs().max().item<double>() : 0.0;
  EXPECT_LE(error, 1e-5 * scale + 1e-5) << "max |diff| " << error << ", output scale " << scale;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalDotProductCudaTest,
                         ::testing::Values(Shape{1, 1, 1, 1, 1}, Shape{2, 3, 37, 16, 24},
                                           Shape{1, 4, 129, 64, 64}, Shape{64, 1, 5, 32, 17},
                                           Shape{1, 2, 300, 256, 65}));

TEST(CausalDotProductCudaTest, RefusesGradientsOnCuda) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor q = torch::randn({1, 1, 4, 8}, torch::kCUDA).requires_grad_();
  const torch::Tensor k = torch::randn({1, 1, 4, 8}, torch::kCUDA);
  const torch::Tensor v = torch::randn({1, 1, 4, 8}, torch::kCUDA);
  EXPECT_THROW(CausalDotProduct(q, k, v), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
