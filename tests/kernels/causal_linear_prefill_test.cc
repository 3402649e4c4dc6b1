#include "kernels/causal_linear_prefill.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/causal_product.h"
#include "kernels/linear_state_step.h"
#include "tests/testing/fixtures.h"

namespace performer::kernels {
namespace {

struct Shape {
  int64_t n, h, l, m, e, chunk;
};

std::string Name(const ::testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  return "N" + std::to_string(s.n) + "H" + std::to_string(s.h) + "L" + std::to_string(s.l) + "M" +
         std::to_string(s.m) + "E" + std::to_string(s.e) + "C" + std::to_string(s.chunk);
}

// sum_j k_j (x) v_j over the whole sequence: (N, H, M, E).
torch::Tensor OuterProductSum(const torch::Tensor& k, const torch::Tensor& v) {
  return torch::matmul(k.transpose(2, 3), v);
}

class CausalLinearPrefillShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(CausalLinearPrefillShapes, MatchesCausalDotProductAndOuterProducts) {
  const Shape s = GetParam();
  torch::manual_seed(11);
  // Feature maps are non-negative; the values are not.
  const torch::Tensor q = torch::rand({s.n, s.h, s.l, s.m});
  const torch::Tensor k = torch::rand({s.n, s.h, s.l, s.m});
  const torch::Tensor v = torch::randn({s.n, s.h, s.l, s.e});
  const double atol = 1e-5 * std::sqrt(static_cast<double>(s.l * s.m * s.e) + 1.0);
  const CausalLinearPrefillResult got = CausalLinearPrefill(q, k, v, {}, s.chunk);
  ASSERT_EQ(got.out.sizes(), v.sizes());
  ASSERT_EQ(got.final_state.sizes(), torch::IntArrayRef({s.n, s.h, s.m, s.e}));
  EXPECT_TENSOR_CLOSE(got.out, CausalDotProduct(q, k, v), atol, 1e-4);
  EXPECT_TENSOR_CLOSE(got.final_state, OuterProductSum(k, v), atol, 1e-4);

  // With an initial state: out gains phi_q S0, the state gains S0.
  const torch::Tensor s0 = torch::randn({s.n, s.h, s.m, s.e});
  const CausalLinearPrefillResult with_state = CausalLinearPrefill(q, k, v, s0, s.chunk);
  EXPECT_TENSOR_CLOSE(with_state.out, CausalDotProduct(q, k, v) + torch::matmul(q, s0), atol, 1e-4);
  EXPECT_TENSOR_CLOSE(with_state.final_state, s0 + OuterProductSum(k, v), atol, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(OddLengths, CausalLinearPrefillShapes,
                         ::testing::Values(Shape{1, 1, 1, 4, 3, 64}, Shape{2, 3, 63, 16, 8, 64},
                                           Shape{1, 2, 64, 7, 5, 64}, Shape{2, 1, 65, 9, 17, 64},
                                           Shape{1, 4, 200, 32, 16, 64}, Shape{3, 2, 200, 5, 6, 7},
                                           Shape{16, 4, 37, 12, 9, 16}, Shape{2, 2, 0, 4, 3, 64},
                                           Shape{1, 1, 50, 3, 2, 1}),
                         Name);

TEST(CausalLinearPrefillTest, ChunkSizeDoesNotChangeTheResult) {
  torch::manual_seed(5);
  const torch::Tensor q = torch::rand({2, 2, 131, 10}, torch::kDouble);
  const torch::Tensor k = torch::rand({2, 2, 131, 10}, torch::kDouble);
  const torch::Tensor v = torch::randn({2, 2, 131, 6}, torch::kDouble);
  const CausalLinearPrefillResult reference = CausalLinearPrefill(q, k, v, {}, 1000);
  EXPECT_EQ(reference.out.scalar_type(), torch::kDouble);
  for (int64_t chunk : {1, 3, 16, 64, 130, 131}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const CausalLinearPrefillResult got = CausalLinearPrefill(q, k, v, {}, chunk);
    EXPECT_TENSOR_CLOSE(got.out, reference.out, 1e-10, 1e-10);
    EXPECT_TENSOR_CLOSE(got.final_state, reference.final_state, 1e-10, 1e-10);
  }
}

// A ones column on v makes the final state the decode state of
// LinearStateStep (R, M, E + 1): one decode step after a prefill of L tokens
// gives the prefill of L + 1 tokens.
TEST(CausalLinearPrefillTest, FinalStateContinuesWithLinearStateStep) {
  torch::manual_seed(9);
  const int64_t N = 3, H = 2, L = 70, M = 12, E = 5, R = N * H;
  const torch::Tensor q = torch::rand({N, H, L + 1, M});
  const torch::Tensor k = torch::rand({N, H, L + 1, M});
  const torch::Tensor v = torch::randn({N, H, L + 1, E});
  const torch::Tensor v1 = torch::cat({v, torch::ones({N, H, L + 1, 1})}, -1);
  const CausalLinearPrefillResult full = CausalLinearPrefill(q, k, v1);
  const CausalLinearPrefillResult prefix =
      CausalLinearPrefill(q.narrow(2, 0, L), k.narrow(2, 0, L), v1.narrow(2, 0, L));
  torch::Tensor state = prefix.final_state.reshape({R, M, E + 1}).contiguous();
  const torch::Tensor step =
      LinearStateStep(state, q.select(2, L).reshape({R, M}), k.select(2, L).reshape({R, M}),
                      v.select(2, L).reshape({R, E}));
  EXPECT_TENSOR_CLOSE(step, full.out.select(2, L).reshape({R, E + 1}), 1e-4, 1e-4);
  EXPECT_TENSOR_CLOSE(state, full.final_state.reshape({R, M, E + 1}), 1e-4, 1e-4);
  // The normaliser column is phi_q . (sum of keys so far).
  EXPECT_TENSOR_CLOSE(full.out.select(-1, E), (q * k.cumsum(2)).sum(-1), 1e-4, 1e-4);
  // And the prefix outputs are the first L rows of the full prefill.
  EXPECT_TENSOR_CLOSE(prefix.out, full.out.narrow(2, 0, L), 1e-5, 1e-5);
}

// The gradients of `outputs` and of `references` with respect to `inputs`,
// for the same output gradients, agree.
void ExpectSameGradients(const std::vector<torch::Tensor>& outputs,
                         const std::vector<torch::Tensor>& references,
                         const std::vector<torch::Tensor>& inputs,
                         const std::vector<torch::Tensor>& grad_outputs) {
  const auto got = torch::autograd::grad(outputs, inputs, grad_outputs);
  const auto expected = torch::autograd::grad(references, inputs, grad_outputs);
  for (size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE("input " + std::to_string(i));
    EXPECT_TENSOR_CLOSE(got[i], expected[i], 1e-10, 1e-9);
  }
}

TEST(CausalLinearPrefillTest, GradientsMatchCausalDotProduct) {
  torch::manual_seed(13);
  torch::Tensor q = torch::rand({2, 2, 45, 6}, torch::kDouble).requires_grad_();
  torch::Tensor k = torch::rand({2, 2, 45, 6}, torch::kDouble).requires_grad_();
  torch::Tensor v = torch::randn({2, 2, 45, 4}, torch::kDouble).requires_grad_();
  torch::Tensor s0 = torch::randn({2, 2, 6, 4}, torch::kDouble).requires_grad_();
  const torch::Tensor g_out = torch::randn({2, 2, 45, 4}, torch::kDouble);
  const torch::Tensor g_state = torch::randn({2, 2, 6, 4}, torch::kDouble);
  const CausalLinearPrefillResult got = CausalLinearPrefill(q, k, v, s0, 16);
  ExpectSameGradients(
      {got.out, got.final_state},
      {CausalDotProduct(q, k, v) + torch::matmul(q, s0), s0 + torch::matmul(k.transpose(2, 3), v)},
      {q, k, v, s0}, {g_out, g_state});
}

// Without an initial state the first chunk's product is the state itself.
TEST(CausalLinearPrefillTest, GradientsMatchCausalDotProductFromAZeroState) {
  torch::manual_seed(14);
  torch::Tensor q = torch::rand({1, 2, 21, 5}, torch::kDouble).requires_grad_();
  torch::Tensor k = torch::rand({1, 2, 21, 5}, torch::kDouble).requires_grad_();
  torch::Tensor v = torch::randn({1, 2, 21, 3}, torch::kDouble).requires_grad_();
  const torch::Tensor g_out = torch::randn({1, 2, 21, 3}, torch::kDouble);
  const torch::Tensor g_state = torch::randn({1, 2, 5, 3}, torch::kDouble);
  for (int64_t chunk : {8, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    const CausalLinearPrefillResult got = CausalLinearPrefill(q, k, v, {}, chunk);
    ExpectSameGradients({got.out, got.final_state},
                        {CausalDotProduct(q, k, v), torch::matmul(k.transpose(2, 3), v)}, {q, k, v},
                        {g_out, g_state});
  }
}

TEST(CausalLinearPrefillTest, BadInputsAreErrors) {
  const torch::Tensor q = torch::rand({1, 2, 5, 4});
  const torch::Tensor v = torch::rand({1, 2, 5, 3});
  EXPECT_THROW(CausalLinearPrefill(q, torch::rand({1, 2, 5, 5}), v), c10::Error);
  EXPECT_THROW(CausalLinearPrefill(q, q, torch::rand({1, 2, 6, 3})), c10::Error);
  EXPECT_THROW(CausalLinearPrefill(q, q, v, torch::rand({1, 2, 3, 4})), c10::Error);
  EXPECT_THROW(CausalLinearPrefill(q, q, v, {}, 0), c10::Error);
  EXPECT_THROW(CausalLinearPrefill(q.to(torch::kInt), q, v), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
