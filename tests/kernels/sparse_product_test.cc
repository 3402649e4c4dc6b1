#include "kernels/sparse_product.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/kernels/gradient_check.h"

namespace performer::kernels {
namespace {

// Plain LibTorch references: each query gathers its cluster's top-k rows of
// the key/value table; queries with an invalid cluster give 0.
torch::Tensor SelectedRows(const torch::Tensor& table, const torch::Tensor& topk,
                           const torch::Tensor& groups) {
  const int64_t n = table.size(0), h = table.size(1), s = table.size(2), f = table.size(3);
  const int64_t l = groups.size(2), c = topk.size(2), k = topk.size(3);
  torch::Tensor own = groups.clamp(0, c - 1).unsqueeze(-1).expand({n, h, l, k});
  torch::Tensor index = topk.gather(2, own);  // (N,H,L,k)
  return table.unsqueeze(2)
      .expand({n, h, l, s, f})
      .gather(3, index.unsqueeze(-1).expand({n, h, l, k, f}));  // (N,H,L,k,F)
}

torch::Tensor ValidRows(const torch::Tensor& groups, int64_t clusters, torch::Dtype dtype) {
  return groups.ge(0).logical_and(groups.lt(clusters)).unsqueeze(-1).to(dtype);
}

torch::Tensor ReferenceDot(const torch::Tensor& q, const torch::Tensor& k,
                           const torch::Tensor& topk, const torch::Tensor& groups) {
  torch::Tensor dots = (q.unsqueeze(3) * SelectedRows(k, topk, groups)).sum(-1);
  return dots * ValidRows(groups, topk.size(2), q.scalar_type());
}

torch::Tensor ReferenceAverage(const torch::Tensor& w, const torch::Tensor& v,
                               const torch::Tensor& topk, const torch::Tensor& groups) {
  torch::Tensor out = (w.unsqueeze(-1) * SelectedRows(v, topk, groups)).sum(3);
  return out * ValidRows(groups, topk.size(2), v.scalar_type());
}

struct Case {
  torch::Tensor q, k, v, w, topk, groups;
};

Case MakeCase(torch::Dtype dtype) {
  const int64_t n = 2, h = 2, l = 7, s = 6, c = 3, top = 4, e = 3, d = 2;
  Case x;
  x.q = torch::randn({n, h, l, e}, dtype);
  x.k = torch::randn({n, h, s, e}, dtype);
  x.v = torch::randn({n, h, s, d}, dtype);
  x.w = torch::randn({n, h, l, top}, dtype);
  x.topk = torch::randint(0, s, {n, h, c, top}, torch::kInt64);   // repeats allowed
  x.groups = torch::randint(0, c + 2, {n, h, l}, torch::kInt64);  // c, c+1 invalid
  return x;
}

TEST(ClusteredSparseDotProductTest, ForwardMatchesReference) {
  torch::manual_seed(0);
  Case x = MakeCase(torch::kFloat);
  torch::Tensor out = ClusteredSparseDotProduct(x.q, x.k, x.topk, x.groups);
  ASSERT_EQ(out.sizes(), torch::IntArrayRef({2, 2, 7, 4}));
  EXPECT_TRUE(torch::allclose(out, ReferenceDot(x.q, x.k, x.topk, x.groups), 1e-5, 1e-6));
  torch::Tensor invalid = x.groups.ge(3);
  ASSERT_TRUE(invalid.any().item<bool>());
  EXPECT_TRUE(out.index({invalid}).eq(0).all().item<bool>());
}

TEST(ClusteredSparseWeightedAverageTest, ForwardMatchesReference) {
  torch::manual_seed(1);
  Case x = MakeCase(torch::kFloat);
  torch::Tensor out = ClusteredSparseWeightedAverage(x.w, x.v, x.topk, x.groups);
  ASSERT_EQ(out.sizes(), torch::IntArrayRef({2, 2, 7, 2}));
  EXPECT_TRUE(torch::allclose(out, ReferenceAverage(x.w, x.v, x.topk, x.groups), 1e-5, 1e-6));
}

TEST(ClusteredSparseDotProductTest, BackwardMatchesReferenceAndFiniteDifferences) {
  torch::manual_seed(2);
  Case x = MakeCase(torch::kDouble);
  torch::Tensor q1 = x.q.clone().requires_grad_(true), k1 = x.k.clone().requires_grad_(true);
  torch::Tensor q2 = x.q.clone().requires_grad_(true), k2 = x.k.clone().requires_grad_(true);
  torch::Tensor g = torch::randn({2, 2, 7, 4}, torch::kDouble);
  (ClusteredSparseDotProduct(q1, k1, x.topk, x.groups) * g).sum().backward();
  (ReferenceDot(q2, k2, x.topk, x.groups) * g).sum().backward();
  EXPECT_TRUE(torch::allclose(q1.grad(), q2.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(k1.grad(), k2.grad(), 1e-12, 1e-12));
  testing::ExpectGradientsMatchFiniteDifferences(
      [&](const std::vector<torch::Tensor>& in) {
        return ClusteredSparseDotProduct(in[0], in[1], x.topk, x.groups);
      },
      {x.q, x.k}, {0, 1});
}

TEST(ClusteredSparseWeightedAverageTest, BackwardMatchesReferenceAndFiniteDifferences) {
  torch::manual_seed(3);
  Case x = MakeCase(torch::kDouble);
  torch::Tensor w1 = x.w.clone().requires_grad_(true), v1 = x.v.clone().requires_grad_(true);
  torch::Tensor w2 = x.w.clone().requires_grad_(true), v2 = x.v.clone().requires_grad_(true);
  torch::Tensor g = torch::randn({2, 2, 7, 2}, torch::kDouble);
  (ClusteredSparseWeightedAverage(w1, v1, x.topk, x.groups) * g).sum().backward();
  (ReferenceAverage(w2, v2, x.topk, x.groups) * g).sum().backward();
  EXPECT_TRUE(torch::allclose(w1.grad(), w2.grad(), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(v1.grad(), v2.grad(), 1e-12, 1e-12));
  testing::ExpectGradientsMatchFiniteDifferences(
      [&](const std::vector<torch::Tensor>& in) {
        return ClusteredSparseWeightedAverage(in[0], in[1], x.topk, x.groups);
      },
      {x.w, x.v}, {0, 1});
}

TEST(ClusteredSparseDotProductTest, GradientOnlyForInputsThatNeedIt) {
  torch::manual_seed(4);
  Case x = MakeCase(torch::kFloat);
  torch::Tensor k = x.k.clone().requires_grad_(true);
  ClusteredSparseDotProduct(x.q, k, x.topk, x.groups).sum().backward();
  EXPECT_TRUE(k.grad().defined());
  EXPECT_FALSE(x.q.grad().defined());
}

TEST(ClusteredSparseProductTest, RejectsBadArguments) {
  Case x = MakeCase(torch::kFloat);
  torch::Tensor out_of_range = x.topk.clone();
  out_of_range.view({-1})[0] = 6;  // S = 6
  EXPECT_THROW(ClusteredSparseDotProduct(x.q, x.k, out_of_range, x.groups), c10::Error);
  EXPECT_THROW(ClusteredSparseWeightedAverage(x.w, x.v, out_of_range, x.groups), c10::Error);
  EXPECT_THROW(ClusteredSparseDotProduct(x.q, x.v, x.topk, x.groups), c10::Error);  // E != D
  EXPECT_THROW(ClusteredSparseWeightedAverage(x.w.narrow(3, 0, 3), x.v, x.topk, x.groups),
               c10::Error);
  EXPECT_THROW(ClusteredSparseDotProduct(x.q, x.k, x.topk.to(torch::kInt32), x.groups), c10::Error);
  EXPECT_THROW(ClusteredSparseDotProduct(x.q, x.k.to(torch::kDouble), x.topk, x.groups),
               c10::Error);
}

}  // namespace
}  // namespace performer::kernels
