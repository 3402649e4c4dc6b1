// The clustered sparse products of kernels/cuda/sparse_product_cuda.cu run
// on the host (cuda_emulation.h) against the CPU ops, in float32 and
// float64.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/sparse_product.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

template <typename T>
void ExpectMatch(torch::ScalarType dtype) {
  // N 2, H 2, L 40 queries in C 5 clusters, each with its top 6 of S 33
  // keys; E 21.
  torch::manual_seed(31);
  const int64_t n = 2, h = 2, l = 40, s = 33, c = 5, top = 6, e = 21;
  const torch::Tensor q = torch::randn({n, h, l, e}, dtype), k = torch::randn({n, h, s, e}, dtype);
  const torch::Tensor topk = torch::randint(s, {n, h, c, top}, torch::kLong);
  const torch::Tensor groups = torch::randint(c, {n, h, l}, torch::kLong);
  torch::Tensor products = torch::empty({n, h, l, top}, dtype);
  const char* error = cuda_emulated::ClusteredSparseDotProductForward<T>(
      q.data_ptr<T>(), k.data_ptr<T>(), topk.data_ptr<int64_t>(), groups.data_ptr<int64_t>(),
      products.data_ptr<T>(), n * h, l, s, c, top, e, nullptr);
  ASSERT_EQ(error, nullptr) << error;
  EXPECT_TRUE(torch::allclose(products, ClusteredSparseDotProduct(q, k, topk, groups), 1e-5, 1e-6));
  const torch::Tensor weights = torch::rand({n, h, l, top}, dtype);
  const torch::Tensor v = torch::randn({n, h, s, e}, dtype);
  torch::Tensor out = torch::empty({n, h, l, e}, dtype);
  error = cuda_emulated::ClusteredSparseWeightedAverageForward<T>(
      weights.data_ptr<T>(), v.data_ptr<T>(), topk.data_ptr<int64_t>(), groups.data_ptr<int64_t>(),
      out.data_ptr<T>(), n * h, l, s, c, top, e, nullptr);
  ASSERT_EQ(error, nullptr) << error;
  EXPECT_TRUE(
      torch::allclose(out, ClusteredSparseWeightedAverage(weights, v, topk, groups), 1e-5, 1e-6));
}

TEST(SparseProductEmulationTest, BothProductsMatchTheCpu) {
  ExpectMatch<float>(torch::kFloat);
  ExpectMatch<double>(torch::kDouble);
}

}  // namespace
}  // namespace performer::kernels
