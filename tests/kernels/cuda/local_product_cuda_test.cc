// CUDA local (banded) attention products against the CPU kernels.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "kernels/local_product.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

constexpr double kMasked = -1e24;

struct Config {
  int64_t n, h, l, s, e, c;
};

std::string Name(const ::testing::TestParamInfo<Config>& info) {
  const Config& c = info.param;
  return "N" + std::to_string(c.n) + "H" + std::to_string(c.h) + "L" + std::to_string(c.l) + "S" +
         std::to_string(c.s) + "E" + std::to_string(c.e) + "C" + std::to_string(c.c);
}

class LocalProductCudaTest : public ::testing::TestWithParam<Config> {};

TEST_P(LocalProductCudaTest, DotProductMatchesCpu) {
  PERFORMER_REQUIRE_CUDA();
  const Config cfg = GetParam();
  torch::manual_seed(31);
  torch::NoGradGuard no_grad;
  for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    SCOPED_TRACE(dtype == torch::kFloat ? "float32" : "float64");
    const torch::TensorOptions options = torch::TensorOptions().dtype(dtype);
    const torch::Tensor q = torch::randn({cfg.n, cfg.h, cfg.l, cfg.e}, options);
    const torch::Tensor k = torch::randn({cfg.n, cfg.h, cfg.s, cfg.e}, options);
    const torch::Tensor mask = torch::randn({cfg.l, cfg.s}, options)
                                   .masked_fill(torch::rand({cfg.l, cfg.s}) < 0.2, kMasked);
    // Lengths below, at and above S (above counts as S).
    const torch::Tensor lengths =
        torch::randint(0, cfg.s + 3, {cfg.n}, torch::TensorOptions().dtype(torch::kLong));
    const torch::Tensor expected = LocalDotProduct(q, k, mask, lengths, cfg.c);
    const torch::Tensor got =
        LocalDotProduct(q.cuda(), k.cuda(), mask.cuda(), lengths.cuda(), cfg.c).cpu();
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_EQ(got.scalar_type(), dtype);
    const double tol = dtype == torch::kFloat ? 1e-4 : 1e-10;
    EXPECT_TRUE(torch::allclose(got, expected, tol, tol))
        << "max |diff| " << (got - expected).abs().max().item<double>();
  }
}

TEST_P(LocalProductCudaTest, WeightedAverageMatchesCpu) {
  PERFORMER_REQUIRE_CUDA();
  const Config cfg = GetParam();
  torch::manual_seed(32);
  torch::NoGradGuard no_grad;
  for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
    SCOPED_TRACE(dtype == torch::kFloat ? "float32" : "float64");
    const torch::TensorOptions options = torch::TensorOptions().dtype(dtype);
    const torch::Tensor a = torch::softmax(torch::randn({cfg.n, cfg.h, cfg.l, cfg.c}, options), -1);
    const torch::Tensor v = torch::randn({cfg.n, cfg.h, cfg.s, cfg.e}, options);
    const torch::Tensor expected = LocalWeightedAverage(a, v);
    const torch::Tensor got = LocalWeightedAverage(a.cuda(), v.cuda()).cpu();
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double tol = dtype == torch::kFloat ? 1e-5 : 1e-12;
    EXPECT_TRUE(torch::allclose(got, expected, tol, tol))
        << "max |diff| " << (got - expected).abs().max().item<double>();
  }
}

// Odd lengths, S != L, windows wider than the sequence, E and D not multiples
// of the warp, even and odd contexts, many (n, h) rows.
INSTANTIATE_TEST_SUITE_P(Configs, LocalProductCudaTest,
                         ::testing::Values(Config{1, 1, 1, 1, 1, 1}, Config{2, 3, 37, 37, 16, 8},
                                           Config{1, 2, 65, 50, 33, 7}, Config{3, 1, 20, 29, 64, 5},
                                           Config{1, 1, 5, 5, 70, 32}, Config{64, 2, 19, 19, 3, 4},
                                           Config{2, 4, 300, 300, 64, 128},
                                           Config{1, 1, 0, 4, 8, 3}),
                         Name);

TEST(LocalProductCudaChecks, RefusesGradientsOnCuda) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor q = torch::randn({1, 1, 4, 8}, torch::kCUDA).requires_grad_();
  const torch::Tensor k = torch::randn({1, 1, 4, 8}, torch::kCUDA);
  const torch::Tensor mask = torch::zeros({4, 4}, torch::kCUDA);
  const torch::Tensor lengths =
      torch::full({1}, 4, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
  EXPECT_THROW(LocalDotProduct(q, k, mask, lengths, 3), c10::Error);
  const torch::Tensor a = torch::rand({1, 1, 4, 3}, torch::kCUDA).requires_grad_();
  EXPECT_THROW(LocalWeightedAverage(a, k), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
