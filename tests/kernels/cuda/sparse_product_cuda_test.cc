// CUDA clustered sparse products against the CPU kernels on random inputs:
// unsorted groups with padded ids (rows of zeros), E and D past one warp and
// ragged, top-k lists longer than a warp, batch 1 and 64 (N * H).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ostream>
#include <string>
#include <vector>

#include "kernels/sparse_product.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

struct SparseCase {
  int64_t n, h, l, s, e, clusters, k;
};

std::string Name(const ::testing::TestParamInfo<SparseCase>& info) {
  const SparseCase& c = info.param;
  return "N" + std::to_string(c.n) + "H" + std::to_string(c.h) + "L" + std::to_string(c.l) + "S" +
         std::to_string(c.s) + "E" + std::to_string(c.e) + "C" + std::to_string(c.clusters) + "K" +
         std::to_string(c.k);
}

void PrintTo(const SparseCase& c, std::ostream* os) { *os << Name({c, 0}); }

class SparseProductCudaTest : public ::testing::TestWithParam<SparseCase> {};

TEST_P(SparseProductCudaTest, DotProductAndWeightedAverageMatchTheCpu) {
  PERFORMER_REQUIRE_CUDA();
  const SparseCase c = GetParam();
  torch::manual_seed(19);
  for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    SCOPED_TRACE(dtype == torch::kFloat ? "float32" : "float64");
    // The warp sums E (or walks k) in another order than the CPU loop.
    const double tolerance = dtype == torch::kFloat ? 1e-5 : 1e-12;
    const torch::TensorOptions options = torch::TensorOptions().dtype(dtype);
    const torch::Tensor q = torch::randn({c.n, c.h, c.l, c.e}, options);
    const torch::Tensor keys = torch::randn({c.n, c.h, c.s, c.e}, options);
    const torch::Tensor values = torch::randn({c.n, c.h, c.s, c.e + 3}, options);
    const torch::Tensor topk = torch::randint(0, c.s, {c.n, c.h, c.clusters, c.k}, torch::kLong);
    const torch::Tensor groups = torch::randint(-1, c.clusters + 2, {c.n, c.h, c.l}, torch::kLong);
    const torch::Tensor weights = torch::rand({c.n, c.h, c.l, c.k}, options);

    const torch::Tensor scores =
        ClusteredSparseDotProduct(q.cuda(), keys.cuda(), topk.cuda(), groups.cuda());
    ASSERT_TRUE(scores.is_cuda());
    const torch::Tensor expected_scores = ClusteredSparseDotProduct(q, keys, topk, groups);
    ASSERT_EQ(scores.sizes(), expected_scores.sizes());
    EXPECT_TRUE(torch::allclose(scores.cpu(), expected_scores, tolerance, tolerance))
        << "max error " << (scores.cpu() - expected_scores).abs().max().item<double>();

    const torch::Tensor average =
        ClusteredSparseWeightedAverage(weights.cuda(), values.cuda(), topk.cuda(), groups.cuda());
    ASSERT_TRUE(average.is_cuda());
    const torch::Tensor expected_average =
        ClusteredSparseWeightedAverage(weights, values, topk, groups);
    ASSERT_EQ(average.sizes(), expected_average.sizes());
    EXPECT_TRUE(torch::allclose(average.cpu(), expected_average, tolerance, tolerance))
        << "max error " << (average.cpu() - expected_average).abs().max().item<double>();

    // Padded queries get rows of exactly 0 on both outputs.
    const torch::Tensor padded = groups.lt(0).logical_or(groups.ge(c.clusters));
    EXPECT_TRUE(scores.cpu().index({padded}).eq(0).all().item<bool>());
    EXPECT_TRUE(average.cpu().index({padded}).eq(0).all().item<bool>());
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, SparseProductCudaTest,
                         ::testing::Values(SparseCase{1, 1, 1, 1, 1, 1, 1},
                                           SparseCase{2, 3, 37, 29, 33, 4, 7},
                                           SparseCase{1, 64, 50, 40, 64, 5, 32},
                                           SparseCase{2, 2, 20, 300, 100, 3, 70}),
                         Name);

TEST(SparseProductCudaErrors, OutOfRangeTopkAndGradientsAreRefused) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor q = torch::randn({1, 1, 4, 8}).cuda();
  const torch::Tensor keys = torch::randn({1, 1, 6, 8}).cuda();
  const torch::Tensor groups = torch::zeros({1, 1, 4}, torch::kLong).cuda();
  const torch::Tensor bad_topk = torch::full({1, 1, 1, 2}, 6, torch::kLong).cuda();  // S = 6
  try {
    ClusteredSparseDotProduct(q, keys, bad_topk, groups);
    ADD_FAILURE() << "a top-k entry past S was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("topk indices must lie in [0, S = 6)"), std::string::npos)
        << e.what();
  }
  const torch::Tensor topk = torch::zeros({1, 1, 1, 2}, torch::kLong).cuda();
  try {
    ClusteredSparseDotProduct(q.clone().requires_grad_(), keys, topk, groups);
    ADD_FAILURE() << "an input that requires a gradient was accepted on CUDA";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA backward kernel"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace performer::kernels
