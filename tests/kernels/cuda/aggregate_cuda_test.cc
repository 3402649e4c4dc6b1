// CUDA Aggregate / Broadcast against the CPU kernels on random inputs:
// unsorted groups with padded (out-of-range) ids, empty clusters, column
// counts that are not multiples of 32, and cluster counts whose accumulators
// do not fit in shared memory (the kernel then accumulates in its output).
// The CUDA aggregate adds the rows in the CPU's order, so the tolerances are
// a few ulps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ostream>
#include <string>
#include <vector>

#include "kernels/aggregate.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

struct AggregateCase {
  int64_t n, h, l, e, clusters;
};

std::string Name(const ::testing::TestParamInfo<AggregateCase>& info) {
  const AggregateCase& c = info.param;
  return "N" + std::to_string(c.n) + "H" + std::to_string(c.h) + "L" + std::to_string(c.l) + "E" +
         std::to_string(c.e) + "C" + std::to_string(c.clusters);
}

void PrintTo(const AggregateCase& c, std::ostream* os) {
  *os << "N" << c.n << " H" << c.h << " L" << c.l << " E" << c.e << " C" << c.clusters;
}

// Group ids in [-1, C + 1]: about 1 in (C + 3) rows is padded, and with C
// near L some clusters stay empty.
torch::Tensor RandomGroups(const AggregateCase& c) {
  return torch::randint(-1, c.clusters + 2, {c.n, c.h, c.l}, torch::kLong);
}

class AggregateCudaTest : public ::testing::TestWithParam<AggregateCase> {};

TEST_P(AggregateCudaTest, AggregateAndBroadcastMatchTheCpu) {
  PERFORMER_REQUIRE_CUDA();
  const AggregateCase c = GetParam();
  torch::manual_seed(17);
  for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    SCOPED_TRACE(dtype == torch::kFloat ? "float32" : "float64");
    const double tolerance = dtype == torch::kFloat ? 1e-6 : 1e-14;
    const torch::TensorOptions options = torch::TensorOptions().dtype(dtype);
    const torch::Tensor x = torch::randn({c.n, c.h, c.l, c.e}, options);
    const torch::Tensor groups = RandomGroups(c);
    const torch::Tensor factors = torch::rand({c.n, c.h, c.clusters}, options) + 0.5;

    const torch::Tensor expected = Aggregate(x, groups, factors);
    const torch::Tensor got = Aggregate(x.cuda(), groups.cuda(), factors.cuda());
    ASSERT_TRUE(got.is_cuda());
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_TRUE(torch::allclose(got.cpu(), expected, tolerance, tolerance))
        << "max error " << (got.cpu() - expected).abs().max().item<double>();

    const torch::Tensor y = torch::randn({c.n, c.h, c.clusters, c.e}, options);
    const torch::Tensor broadcast = Broadcast(y.cuda(), groups.cuda(), factors.cuda());
    ASSERT_TRUE(broadcast.is_cuda());
    // One product per element on both devices: equal.
    EXPECT_TRUE(torch::equal(broadcast.cpu(), Broadcast(y, groups, factors)));
    // Padded rows are exactly 0.
    const torch::Tensor padded = groups.lt(0).logical_or(groups.ge(c.clusters));
    EXPECT_TRUE(broadcast.cpu().index({padded}).eq(0).all().item<bool>());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AggregateCudaTest,
    ::testing::Values(AggregateCase{1, 1, 1, 1, 1},       // the smallest
                      AggregateCase{2, 3, 37, 33, 5},     // E past one warp, ragged
                      AggregateCase{1, 64, 100, 64, 8},   // batch 64
                      AggregateCase{1, 2, 300, 40, 250},  // float32 shared, float64 in y
                      AggregateCase{2, 1, 700, 7, 600},   // both accumulate in y
                      AggregateCase{2, 2, 0, 16, 3}),     // no rows: zeros
    Name);

TEST(AggregateCudaErrors, GradientsAndMixedDevicesAreRefused) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor x = torch::randn({1, 1, 4, 3}).cuda().requires_grad_();
  const torch::Tensor groups = torch::zeros({1, 1, 4}, torch::kLong).cuda();
  const torch::Tensor factors = torch::ones({1, 1, 2}).cuda();
  try {
    Aggregate(x, groups, factors);
    ADD_FAILURE() << "an input that requires a gradient was accepted on CUDA";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA backward kernel"), std::string::npos) << e.what();
  }
  {
    torch::NoGradGuard no_grad;  // inference: accepted
    EXPECT_EQ(Aggregate(x, groups, factors).size(2), 2);
  }
  try {
    Broadcast(torch::randn({1, 1, 2, 3}).cuda(), groups.cpu(), factors);
    ADD_FAILURE() << "groups on the CPU and data on CUDA were accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("same device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace performer::kernels
