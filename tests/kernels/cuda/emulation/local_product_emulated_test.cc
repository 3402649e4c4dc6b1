// The local attention products of kernels/cuda/local_product_cuda.cu run on
// the host (cuda_emulation.h) against the CPU ops, in float32 and float64.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/local_product.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

template <typename T>
void ExpectMatch(torch::ScalarType dtype) {
  // N 2, H 3, L 29 queries, S 31 keys, E 12, a window of 9; the second
  // sequence's keys end at 20.
  torch::manual_seed(23);
  const int64_t n = 2, h = 3, l = 29, s = 31, e = 12, context = 9;
  const torch::Tensor q = torch::randn({n, h, l, e}, dtype), k = torch::randn({n, h, s, e}, dtype);
  const torch::Tensor mask = torch::randn({l, s}, dtype) * 0.1;
  const torch::Tensor lengths = torch::tensor({s, int64_t{20}}, torch::kLong);
  torch::Tensor scores = torch::empty({n, h, l, context}, dtype);
  const char* error = cuda_emulated::LocalDotProductForward<T>(
      q.data_ptr<T>(), k.data_ptr<T>(), mask.data_ptr<T>(), lengths.data_ptr<int64_t>(),
      scores.data_ptr<T>(), n * h, h, l, s, e, context, nullptr);
  ASSERT_EQ(error, nullptr) << error;
  const torch::Tensor expected = LocalDotProduct(q, k, mask, lengths, context);
  // Out-of-window and masked scores are -inf on both sides.
  EXPECT_TRUE(torch::allclose(scores, expected, 1e-5, 1e-5, /*equal_nan=*/true));
  const torch::Tensor attention = torch::softmax(torch::randn({n, h, l, context}, dtype), -1);
  const torch::Tensor v = torch::randn({n, h, s, e}, dtype);
  torch::Tensor out = torch::empty({n, h, l, e}, dtype);
  error = cuda_emulated::LocalWeightedAverageForward<T>(attention.data_ptr<T>(), v.data_ptr<T>(),
                                                        out.data_ptr<T>(), n * h, l, s, e, context,
                                                        nullptr);
  ASSERT_EQ(error, nullptr) << error;
  EXPECT_TRUE(torch::allclose(out, LocalWeightedAverage(attention, v), 1e-5, 1e-6));
}

TEST(LocalProductEmulationTest, BothProductsMatchTheCpu) {
  ExpectMatch<float>(torch::kFloat);
  ExpectMatch<double>(torch::kDouble);
}

}  // namespace
}  // namespace performer::kernels
