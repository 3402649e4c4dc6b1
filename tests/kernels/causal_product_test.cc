#include "kernels/causal_product.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/simd.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/gradcheck.h"

namespace performer::kernels {
namespace {

// The plain formulation: masked (Q K^T) V, O(L^2) memory.
torch::Tensor ReferenceCausalProduct(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v) {
  const int64_t L = q.size(2);
  torch::Tensor causal = torch::ones({L, L}, q.options().requires_grad(false)).tril();
  return torch::matmul(torch::matmul(q, k.transpose(-2, -1)) * causal, v);
}

// Runs the kernels' portable instantiations while alive (the AVX2 ones run
// otherwise, where the CPU has AVX2).
class ForcePortableSimd {
 public:
  explicit ForcePortableSimd(bool force) { cpu::simd::ForcePortableForTesting() = force; }
  ~ForcePortableSimd() { cpu::simd::ForcePortableForTesting() = false; }
};

struct Shape {
  int64_t n, h, l, e, m;
};

class CausalProductShapes : public ::testing::TestWithParam<Shape> {};

// Forward and all three gradients against autograd through the reference, on
// shapes that exercise the 4-row blocks, their remainders (L % 4 != 0), the
// vector columns and their scalar tails (M % 8 != 0), E != M and more (n, h)
// slices than threads.
TEST_P(CausalProductShapes, MatchesMaskedReferenceForwardAndBackward) {
  const Shape s = GetParam();
  torch::manual_seed(7);
  auto make = [](std::vector<int64_t> shape) {
    return torch::randn(shape, torch::kFloat).requires_grad_(true);
  };
  torch::Tensor q = make({s.n, s.h, s.l, s.e});
  torch::Tensor k = make({s.n, s.h, s.l, s.e});
  torch::Tensor v = make({s.n, s.h, s.l, s.m});
  torch::Tensor grad_out = torch::randn({s.n, s.h, s.l, s.m});

  torch::Tensor expected = ReferenceCausalProduct(q, k, v);
  auto expected_grads = torch::autograd::grad({expected}, {q, k, v}, {grad_out});
  // Sums over up to L * E products of unit normals: absolute error grows with
  // sqrt(L * E * M).
  const double atol = 1e-5 * std::sqrt(static_cast<double>(s.l * s.e * s.m));
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable SIMD path" : "default SIMD path");
    ForcePortableSimd force(portable);
    torch::Tensor out = CausalDotProduct(q, k, v);
    EXPECT_TENSOR_CLOSE(out, expected, atol, 1e-4);
    auto grads = torch::autograd::grad({out}, {q, k, v}, {grad_out});
    EXPECT_TENSOR_CLOSE(grads[0], expected_grads[0], atol, 1e-4);
    EXPECT_TENSOR_CLOSE(grads[1], expected_grads[1], atol, 1e-4);
    EXPECT_TENSOR_CLOSE(grads[2], expected_grads[2], atol, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(OddSizes, CausalProductShapes,
                         ::testing::Values(Shape{2, 3, 37, 5, 7}, Shape{1, 5, 129, 16, 24},
                                           Shape{3, 2, 66, 33, 9}, Shape{1, 1, 1, 4, 3},
                                           Shape{1, 2, 3, 1, 1}, Shape{2, 1, 0, 3, 2},
                                           Shape{2, 4, 250, 64, 64}));

TEST(CausalProductTest, Float64MatchesReferenceTightly) {
  torch::manual_seed(3);
  torch::Tensor q = torch::randn({2, 3, 45, 6}, torch::kDouble);
  torch::Tensor k = torch::randn({2, 3, 45, 6}, torch::kDouble);
  torch::Tensor v = torch::randn({2, 3, 45, 11}, torch::kDouble);
  for (bool portable : {false, true}) {
    ForcePortableSimd force(portable);
    torch::Tensor out = CausalDotProduct(q, k, v);
    EXPECT_EQ(out.scalar_type(), torch::kDouble);
    EXPECT_TENSOR_CLOSE(out, ReferenceCausalProduct(q, k, v), 1e-11, 1e-11);
  }
}

TEST(CausalProductTest, FiniteDifferenceGradCheck) {
  torch::manual_seed(11);
  std::vector<torch::Tensor> inputs = {torch::randn({1, 2, 6, 3}), torch::randn({1, 2, 6, 3}),
                                       torch::randn({1, 2, 6, 5})};
  auto fn = [](const std::vector<torch::Tensor>& x) { return CausalDotProduct(x[0], x[1], x[2]); };
  auto mismatch = testing::GradCheck(fn, inputs);
  EXPECT_FALSE(mismatch.has_value()) << *mismatch;
}

TEST(CausalProductTest, OutputRowDependsOnlyOnPrefix) {
  torch::manual_seed(5);
  torch::Tensor q = torch::randn({1, 2, 20, 4});
  torch::Tensor k = torch::randn({1, 2, 20, 4});
  torch::Tensor v = torch::randn({1, 2, 20, 3});
  torch::Tensor out = CausalDotProduct(q, k, v);
  torch::Tensor k2 = k.clone();
  torch::Tensor v2 = v.clone();
  k2.narrow(2, 12, 8).normal_();
  v2.narrow(2, 12, 8).normal_();
  torch::Tensor out2 = CausalDotProduct(q, k2, v2);
  EXPECT_TRUE(torch::equal(out.narrow(2, 0, 12), out2.narrow(2, 0, 12)));
  EXPECT_FALSE(torch::allclose(out.narrow(2, 12, 8), out2.narrow(2, 12, 8)));
}

TEST(CausalProductTest, AcceptsNonContiguousInputs) {
  torch::manual_seed(9);
  // (N, L, H, E) permuted to (N, H, L, E), as the attention layer produces.
  torch::Tensor q = torch::randn({2, 17, 3, 8}).permute({0, 2, 1, 3});
  torch::Tensor k = torch::randn({2, 17, 3, 8}).permute({0, 2, 1, 3});
  torch::Tensor v = torch::randn({2, 17, 3, 5}).permute({0, 2, 1, 3});
  ASSERT_FALSE(q.is_contiguous());
  EXPECT_TENSOR_CLOSE(CausalDotProduct(q, k, v), ReferenceCausalProduct(q, k, v), 1e-5, 1e-4);
}

TEST(CausalProductTest, OnlyRequestedGradientsAreComputed) {
  torch::Tensor q = torch::randn({1, 1, 5, 2}).requires_grad_(true);
  torch::Tensor k = torch::randn({1, 1, 5, 2});
  torch::Tensor v = torch::randn({1, 1, 5, 2});
  CausalDotProduct(q, k, v).sum().backward();
  ASSERT_TRUE(q.grad().defined());
  EXPECT_TENSOR_CLOSE(
      q.grad(), torch::autograd::grad({ReferenceCausalProduct(q, k, v).sum()}, {q})[0], 1e-5, 1e-4);
  EXPECT_FALSE(k.grad().defined());
}

TEST(CausalProductTest, RejectsMismatchedShapesAndDtypes) {
  torch::Tensor q = torch::randn({1, 2, 5, 4});
  EXPECT_THROW(CausalDotProduct(q, torch::randn({1, 2, 6, 4}), torch::randn({1, 2, 5, 3})),
               c10::Error);
  EXPECT_THROW(CausalDotProduct(q, torch::randn({1, 2, 5, 4}), torch::randn({1, 2, 4, 3})),
               c10::Error);
  EXPECT_THROW(CausalDotProduct(q, q.to(torch::kDouble), torch::randn({1, 2, 5, 3})), c10::Error);
  EXPECT_THROW(CausalDotProduct(q.to(torch::kInt), q.to(torch::kInt), q.to(torch::kInt)),
               c10::Error);
  EXPECT_THROW(CausalDotProduct(q[0], q[0], q[0]), c10::Error);
}

TEST(CausalProductTest, RejectsDevicesWithoutKernel) {
  torch::Tensor q = torch::empty({1, 1, 3, 2}, torch::TensorOptions().device(torch::kMeta));
  try {
    CausalDotProduct(q, q, q);
    FAIL() << "expected an error for a meta tensor";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel for device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace performer::kernels
