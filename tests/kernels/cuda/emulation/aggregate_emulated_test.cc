// Aggregate and broadcast of kernels/cuda/aggregate_cuda.cu run on the host
// (cuda_emulation.h) against the CPU ops, in float32 and float64.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/aggregate.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

template <typename T>
void ExpectMatch(torch::ScalarType dtype) {
  // N 2, H 2, L 50 rows in C 7 clusters, D 37 columns.
  torch::manual_seed(29);
  const int64_t n = 2, h = 2, l = 50, c = 7, d = 37;
  const torch::Tensor x = torch::randn({n, h, l, d}, dtype);
  const torch::Tensor groups = torch::randint(c, {n, h, l}, torch::kLong);
  const torch::Tensor factors = torch::rand({n, h, c}, dtype);
  torch::Tensor y = torch::empty({n, h, c, d}, dtype);
  const char* error = cuda_emulated::AggregateForward<T>(
      x.data_ptr<T>(), groups.data_ptr<int64_t>(), factors.data_ptr<T>(), y.data_ptr<T>(), n * h, l,
      c, d, nullptr);
  ASSERT_EQ(error, nullptr) << error;
  EXPECT_TRUE(torch::allclose(y, Aggregate(x, groups, factors), 1e-5, 1e-6));
  torch::Tensor back = torch::empty({n, h, l, d}, dtype);
  error = cuda_emulated::BroadcastForward<T>(y.data_ptr<T>(), groups.data_ptr<int64_t>(),
                                             factors.data_ptr<T>(), back.data_ptr<T>(), n * h, l, c,
                                             d, nullptr);
  ASSERT_EQ(error, nullptr) << error;
  EXPECT_TRUE(torch::allclose(back, Broadcast(y, groups, factors), 1e-5, 1e-6));
}

TEST(AggregateEmulationTest, AggregateAndBroadcastMatchTheCpu) {
  ExpectMatch<float>(torch::kFloat);
  ExpectMatch<double>(torch::kDouble);
}

}  // namespace
}  // namespace performer::kernels
