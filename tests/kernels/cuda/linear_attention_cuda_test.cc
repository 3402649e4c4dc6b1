// CUDA non-causal linear attention against the CPU kernel (its reference).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/linear_attention.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

struct Shape {
  int64_t n, h, l, s, m, e;
};

class LinearAttentionCudaTest : public ::testing::TestWithParam<Shape> {};

TEST_P(LinearAttentionCudaTest, MatchesCpuKernel) {
  PERFORMER_REQUIRE_CUDA();
  const Shape p = GetParam();
  torch::manual_seed(71);
  const torch::Tensor phi_q = torch::rand({p.n, p.h, p.l, p.m});
  const torch::Tensor phi_k = torch::rand({p.n, p.h, p.s, p.m});
  const torch::Tensor v = torch::randn({p.n, p.h, p.s, p.e});
  torch::NoGradGuard no_grad;
  for (double eps : {1e-6, 0.0}) {
    const torch::Tensor expected = LinearAttentionForward(phi_q, phi_k, v, eps);
    const torch::Tensor got =
        LinearAttentionForward(phi_q.cuda(), phi_k.cuda(), v.cuda(), eps).cpu();
    EXPECT_EQ(got.sizes(), expected.sizes());
    EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-5))
        << "max |diff| " << (got - expected).abs().max().item<float>();
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearAttentionCudaTest,
                         ::testing::Values(Shape{1, 1, 1, 1, 1, 1}, Shape{2, 3, 7, 9, 17, 33},
                                           Shape{1, 4, 65, 33, 64, 16}, Shape{3, 2, 5, 130, 19, 7},
                                           Shape{2, 8, 1024, 1024, 256, 64}));

TEST(LinearAttentionCudaTest, NonContiguousAndHalfInputs) {
  PERFORMER_REQUIRE_CUDA();
  torch::manual_seed(72);
  // (N, L, H, M) storage viewed as (N, H, L, M), as attention layers hold it.
  const torch::Tensor phi_q = torch::rand({2, 9, 3, 8}).transpose(1, 2);
  const torch::Tensor phi_k = torch::rand({2, 11, 3, 8}).transpose(1, 2);
  const torch::Tensor v = torch::randn({2, 11, 3, 5}).transpose(1, 2);
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = LinearAttentionForward(phi_q, phi_k, v);
  const torch::Tensor got = LinearAttentionForward(phi_q.cuda(), phi_k.cuda(), v.cuda()).cpu();
  EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-5));
  const torch::Tensor half = LinearAttentionForward(
      phi_q.cuda().to(torch::kHalf), phi_k.cuda().to(torch::kHalf), v.cuda().to(torch::kHalf));
  EXPECT_EQ(half.scalar_type(), torch::kHalf);
}

TEST(LinearAttentionCudaTest, RefusesGradientsOnCuda) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor q = torch::rand({1, 1, 4, 8}, torch::kCUDA).requires_grad_();
  const torch::Tensor k = torch::rand({1, 1, 4, 8}, torch::kCUDA);
  const torch::Tensor v = torch::randn({1, 1, 4, 8}, torch::kCUDA);
  EXPECT_THROW(LinearAttentionForward(q, k, v), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
