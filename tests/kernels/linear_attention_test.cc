#include "kernels/linear_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/testing/fixtures.h"

namespace performer::kernels {
namespace {

// fast-transformers' LinearAttention after the feature map, in its (N, L, H,
// D) einsum form: z = 1 / (phi_q . sum_s phi_k + eps); out = phi_q KV z.
torch::Tensor Reference(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                        const torch::Tensor& v, double eps) {
  const torch::Tensor q = phi_q.permute({0, 2, 1, 3});  // (N, L, H, M)
  const torch::Tensor k = phi_k.permute({0, 2, 1, 3});
  const torch::Tensor values = v.permute({0, 2, 1, 3});
  const torch::Tensor kv = torch::einsum("nshd,nshm->nhmd", {k, values});
  const torch::Tensor z = 1 / (torch::einsum("nlhd,nhd->nlh", {q, k.sum(1)}) + eps);
  return torch::einsum("nlhd,nhmd,nlh->nlhm", {q, kv, z}).permute({0, 2, 1, 3});
}

struct Shape {
  int64_t n, h, l, s, m, e;
};

class LinearAttentionTest : public ::testing::TestWithParam<Shape> {};

TEST_P(LinearAttentionTest, MatchesTheFastTransformersFormula) {
  const Shape p = GetParam();
  torch::manual_seed(61);
  for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    const torch::TensorOptions o = torch::TensorOptions().dtype(dtype);
    const torch::Tensor phi_q = torch::rand({p.n, p.h, p.l, p.m}, o);
    const torch::Tensor phi_k = torch::rand({p.n, p.h, p.s, p.m}, o);
    const torch::Tensor v = torch::randn({p.n, p.h, p.s, p.e}, o);
    for (double eps : {1e-6, 0.0}) {
      const torch::Tensor got = LinearAttentionForward(phi_q, phi_k, v, eps);
      EXPECT_EQ(got.sizes(), torch::IntArrayRef({p.n, p.h, p.l, p.e}));
      const double tol = dtype == torch::kFloat ? 1e-5 : 1e-12;
      EXPECT_TENSOR_CLOSE(got, Reference(phi_q, phi_k, v, eps), tol, tol);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearAttentionTest,
                         ::testing::Values(Shape{1, 1, 1, 1, 1, 1}, Shape{2, 3, 7, 9, 17, 33},
                                           Shape{1, 4, 65, 33, 64, 16},
                                           Shape{3, 2, 5, 130, 19, 7}));

TEST(LinearAttentionTest, IsDifferentiableOnTheCpu) {
  torch::manual_seed(62);
  const torch::Tensor phi_q = torch::rand({1, 2, 3, 4}, torch::kDouble).requires_grad_();
  const torch::Tensor phi_k = torch::rand({1, 2, 5, 4}, torch::kDouble).requires_grad_();
  const torch::Tensor v = torch::randn({1, 2, 5, 3}, torch::kDouble).requires_grad_();
  LinearAttentionForward(phi_q, phi_k, v).sum().backward();
  const torch::Tensor q2 = phi_q.detach().clone().requires_grad_();
  const torch::Tensor k2 = phi_k.detach().clone().requires_grad_();
  const torch::Tensor v2 = v.detach().clone().requires_grad_();
  Reference(q2, k2, v2, 1e-6).sum().backward();
  EXPECT_TENSOR_CLOSE(phi_q.grad(), q2.grad(), 1e-12, 1e-10);
  EXPECT_TENSOR_CLOSE(phi_k.grad(), k2.grad(), 1e-12, 1e-10);
  EXPECT_TENSOR_CLOSE(v.grad(), v2.grad(), 1e-12, 1e-10);
}

TEST(LinearAttentionTest, BadShapesAreErrors) {
  const torch::Tensor q = torch::rand({1, 2, 3, 4});
  EXPECT_THROW(LinearAttentionForward(q, torch::rand({1, 2, 5, 3}), torch::rand({1, 2, 5, 2})),
               c10::Error);
  EXPECT_THROW(LinearAttentionForward(q, torch::rand({1, 2, 5, 4}), torch::rand({1, 2, 6, 2})),
               c10::Error);
  EXPECT_THROW(LinearAttentionForward(q, torch::rand({1, 2, 5, 4}, torch::kDouble),
                                      torch::rand({1, 2, 5, 2})),
               c10::Error);
}

}  // namespace
}  // namespace performer::kernels
