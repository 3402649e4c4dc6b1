#include "kernels/aggregate.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/kernels/gradient_check.h"

namespace performer::kernels {
namespace {

// Plain LibTorch references; ids outside [0, C) are dropped.
torch::Tensor ValidOneHot(const torch::Tensor& groups, int64_t clusters, torch::Dtype dtype) {
  torch::Tensor valid = groups.ge(0).logical_and(groups.lt(clusters));
  torch::Tensor safe = groups.clamp(0, clusters - 1);
  return torch::one_hot(safe, clusters).to(dtype) * valid.unsqueeze(-1).to(dtype);  // (N,H,L,C)
}

torch::Tensor ReferenceAggregate(const torch::Tensor& x, const torch::Tensor& groups,
                                 const torch::Tensor& factors) {
  torch::Tensor one_hot = ValidOneHot(groups, factors.size(2), x.scalar_type());
  return torch::matmul(one_hot.transpose(-2, -1), x) * factors.unsqueeze(-1);
}

torch::Tensor ReferenceBroadcast(const torch::Tensor& y, const torch::Tensor& groups,
                                 const torch::Tensor& factors) {
  torch::Tensor one_hot = ValidOneHot(groups, y.size(2), y.scalar_type());
  return torch::matmul(one_hot, y * factors.unsqueeze(-1));
}

struct Case {
  torch::Tensor x, y, groups, factors;
};

Case MakeCase(torch::Dtype dtype, int64_t length = 9, int64_t clusters = 4, int64_t dims = 3) {
  Case c;
  c.x = torch::randn({2, 3, length, dims}, dtype);
  c.y = torch::randn({2, 3, clusters, dims}, dtype);
  // Ids in [-1, C + 1]: both kinds of invalid ids appear.
  c.groups = torch::randint(-1, clusters + 2, {2, 3, length}, torch::kInt64);
  c.factors = torch::rand({2, 3, clusters}, dtype) + 0.5;
  return c;
}

TEST(AggregateTest, ForwardMatchesReference) {
  torch::manual_seed(0);
  Case c = MakeCase(torch::kFloat);
  torch::Tensor y = Aggregate(c.x, c.groups, c.factors);
  ASSERT_EQ(y.sizes(), torch::IntArrayRef({2, 3, 4, 3}));
  EXPECT_TRUE(torch::allclose(y, ReferenceAggregate(c.x, c.groups, c.factors), 1e-5, 1e-6));
}

TEST(BroadcastTest, ForwardMatchesReferenceAndZeroesInvalidIds) {
  torch::manual_seed(1);
  Case c = MakeCase(torch::kFloat);
  torch::Tensor x = Broadcast(c.y, c.groups, c.factors);
  ASSERT_EQ(x.sizes(), torch::IntArrayRef({2, 3, 9, 3}));
  EXPECT_TRUE(torch::allclose(x, ReferenceBroadcast(c.y, c.groups, c.factors), 1e-5, 1e-6));
  torch::Tensor invalid = c.groups.lt(0).logical_or(c.groups.ge(4));
  ASSERT_TRUE(invalid.any().item<bool>());
  EXPECT_TRUE(x.index({invalid}).eq(0).all().item<bool>());
}

TEST(AggregateTest, NonContiguousInputsWork) {
  torch::manual_seed(2);
  Case c = MakeCase(torch::kDouble);
  torch::Tensor x_t = c.x.transpose(1, 2).contiguous().transpose(1, 2);  // same values, strided
  EXPECT_TRUE(torch::allclose(Aggregate(x_t, c.groups, c.factors),
                              ReferenceAggregate(c.x, c.groups, c.factors)));
}

TEST(AggregateTest, BackwardMatchesReferenceAndFiniteDifferences) {
  torch::manual_seed(3);
  Case c = MakeCase(torch::kDouble);
  torch::Tensor x1 = c.x.clone().requires_grad_(true);
  torch::Tensor x2 = c.x.clone().requires_grad_(true);
  torch::Tensor w = torch::randn({2, 3, 4, 3}, torch::kDouble);
  (Aggregate(x1, c.groups, c.factors) * w).sum().backward();
  (ReferenceAggregate(x2, c.groups, c.factors) * w).sum().backward();
  EXPECT_TRUE(torch::allclose(x1.grad(), x2.grad(), 1e-12, 1e-12));
  testing::ExpectGradientsMatchFiniteDifferences(
      [&](const std::vector<torch::Tensor>& in) { return Aggregate(in[0], c.groups, c.factors); },
      {c.x}, {0});
}

TEST(BroadcastTest, BackwardMatchesReferenceAndFiniteDifferences) {
  torch::manual_seed(4);
  Case c = MakeCase(torch::kDouble);
  torch::Tensor y1 = c.y.clone().requires_grad_(true);
  torch::Tensor y2 = c.y.clone().requires_grad_(true);
  torch::Tensor w = torch::randn({2, 3, 9, 3}, torch::kDouble);
  (Broadcast(y1, c.groups, c.factors) * w).sum().backward();
  (ReferenceBroadcast(y2, c.groups, c.factors) * w).sum().backward();
  EXPECT_TRUE(torch::allclose(y1.grad(), y2.grad(), 1e-12, 1e-12));
  testing::ExpectGradientsMatchFiniteDifferences(
      [&](const std::vector<torch::Tensor>& in) { return Broadcast(in[0], c.groups, c.factors); },
      {c.y}, {0});
}

TEST(AggregateTest, RejectsBadArguments) {
  Case c = MakeCase(torch::kFloat);
  EXPECT_THROW(Aggregate(c.x, c.groups.to(torch::kInt32), c.factors), c10::Error);
  EXPECT_THROW(Aggregate(c.x, c.groups.narrow(2, 0, 5), c.factors), c10::Error);
  EXPECT_THROW(Aggregate(c.x, c.groups, c.factors.to(torch::kDouble)), c10::Error);
  EXPECT_THROW(Aggregate(c.x, c.groups, c.factors.clone().requires_grad_(true)), c10::Error);
  EXPECT_THROW(Broadcast(c.y, c.groups, c.factors.narrow(2, 0, 2)), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
