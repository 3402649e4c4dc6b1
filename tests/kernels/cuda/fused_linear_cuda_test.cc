// The CUDA FusedLinear against the CPU one (its reference): every
// combination of norm, GELU and residual, float32 and bfloat16 weights,
// batches that take 1, 2, 4 and 8 rows per block and a ragged last block,
// widths with and without 16-byte weight loads, and shared memory past the
// default 48 KiB; the tensor-core kernel for bfloat16 weights; and, under
// kernels::CudaRowInvariance(), each row's bits whatever the number of rows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "kernels/cuda_row_invariance.h"
#include "kernels/fused_linear.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

struct FusedShape {
  int64_t rows, in, out;
};

class FusedLinearCudaTest : public ::testing::TestWithParam<FusedShape> {};

FusedLinearOptions Options(int mask, const torch::Tensor& bias, const torch::Tensor& gamma,
                           const torch::Tensor& beta, const torch::Tensor& residual) {
  FusedLinearOptions o;
  o.bias = bias;
  if (mask & 1) {
    o.norm_weight = gamma;
    o.norm_bias = beta;
  }
  if (mask & 2) o.activation = FusedActivation::kGelu;
  if (mask & 4) o.residual = residual;
  return o;
}

FusedLinearOptions OnDevice(const FusedLinearOptions& o) {
  FusedLinearOptions d = o;
  for (torch::Tensor* t : {&d.bias, &d.norm_weight, &d.norm_bias, &d.residual}) {
    if (t->defined()) *t = t->cuda();
  }
  return d;
}

TEST_P(FusedLinearCudaTest, MatchesTheCpuKernel) {
  PERFORMER_REQUIRE_CUDA();
  const FusedShape s = GetParam();
  torch::manual_seed(61);
  const torch::Tensor x = torch::randn({s.rows, s.in});
  const torch::Tensor weight = torch::randn({s.out, s.in}) / std::sqrt(static_cast<double>(s.in));
  const torch::Tensor bias = torch::randn({s.out});
  const torch::Tensor gamma = 1.0 + 0.1 * torch::randn({s.in}), beta = 0.1 * torch::randn({s.in});
  const torch::Tensor residual = torch::randn({s.rows, s.out});
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor w = weight.to(dtype);
    // The CPU's bf16 path rounds x to bf16 on AVX-512 machines; the
    // reference here takes the widened weights in float32.
    const torch::Tensor w_cpu = w.to(torch::kFloat);
    for (int mask = 0; mask < 8; ++mask) {
      const FusedLinearOptions o = Options(mask, bias, gamma, beta, residual);
      const torch::Tensor expected = FusedLinear(x, w_cpu, o);
      const torch::Tensor got = FusedLinear(x.cuda(), w.cuda(), OnDevice(o)).cpu();
      ASSERT_EQ(got.sizes(), expected.sizes());
      EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-4))
          << dtype << " mask " << mask << " max |diff| "
          << (got - expected).abs().max().item<float>();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedLinearCudaTest,
                         ::testing::Values(FusedShape{1, 512, 1536}, FusedShape{2, 512, 512},
                                           FusedShape{3, 100, 37}, FusedShape{8, 2048, 512},
                                           FusedShape{13, 512, 2048}, FusedShape{64, 64, 256},
                                           FusedShape{257, 520, 33}, FusedShape{5, 8000, 9}),
                         [](const ::testing::TestParamInfo<FusedShape>& info) {
                           return "rows" + std::to_string(info.param.rows) + "_in" +
                                  std::to_string(info.param.in) + "_out" +
                                  std::to_string(info.param.out);
                         });

// Above the threshold with bfloat16 weights and SetCudaFusedLinearTensorCores:
// the tensor-core kernel (x as hi + lo bf16 terms) against the CPU with the
// widened weights and float32 x, every epilogue; ragged row and output
// tiles (40 x 48), and shapes it does not take (in 520, out 33), which keep
// cuBLAS.
class FusedLinearTensorCoreCudaTest : public ::testing::TestWithParam<FusedShape> {};

TEST_P(FusedLinearTensorCoreCudaTest, MatchesTheCpuKernel) {
  PERFORMER_REQUIRE_CUDA();
  const FusedShape s = GetParam();
  torch::manual_seed(64);
  const torch::Tensor x = torch::randn({s.rows, s.in});
  const torch::Tensor w =
      (torch::randn({s.out, s.in}) / std::sqrt(static_cast<double>(s.in))).to(torch::kBFloat16);
  const torch::Tensor bias = torch::randn({s.out});
  const torch::Tensor gamma = 1.0 + 0.1 * torch::randn({s.in}), beta = 0.1 * torch::randn({s.in});
  const torch::Tensor residual = torch::randn({s.rows, s.out});
  const int64_t max_rows = CudaFusedLinearMaxRows();
  SetCudaFusedLinearMaxRows(8);
  SetCudaFusedLinearTensorCores(true);
  for (int mask = 0; mask < 8; ++mask) {
    const FusedLinearOptions o = Options(mask, bias, gamma, beta, residual);
    const torch::Tensor expected = FusedLinear(x, w.to(torch::kFloat), o);
    const torch::Tensor got = FusedLinear(x.cuda(), w.cuda(), OnDevice(o)).cpu();
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_TRUE(torch::allclose(got, expected, 1e-4, 1e-4))
        << "mask " << mask << " max |diff| " << (got - expected).abs().max().item<float>();
  }
  SetCudaFusedLinearTensorCores(false);
  SetCudaFusedLinearMaxRows(max_rows);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedLinearTensorCoreCudaTest,
                         ::testing::Values(FusedShape{33, 512, 1536}, FusedShape{64, 512, 512},
                                           FusedShape{96, 2048, 512}, FusedShape{257, 512, 2048},
                                           FusedShape{40, 64, 48}, FusedShape{64, 520, 33}),
                         [](const ::testing::TestParamInfo<FusedShape>& info) {
                           return "rows" + std::to_string(info.param.rows) + "_in" +
                                  std::to_string(info.param.in) + "_out" +
                                  std::to_string(info.param.out);
                         });

TEST(FusedLinearCudaRepeat, RepeatedCallsAreIdentical) {
  PERFORMER_REQUIRE_CUDA();
  torch::manual_seed(62);
  const torch::Tensor x = torch::randn({4, 256}).cuda();
  const torch::Tensor w = (torch::randn({384, 256}) * 0.05).to(torch::kBFloat16).cuda();
  FusedLinearOptions o;
  o.norm_weight = torch::ones({256}).cuda();
  o.activation = FusedActivation::kGelu;
  const torch::Tensor eager = FusedLinear(x, w, o);
  EXPECT_TRUE(torch::equal(FusedLinear(x, w, o), eager)) << "two eager calls differ";
}

TEST(FusedLinearCudaRows, AboveTheThresholdCublasGivesTheSameResult) {
  PERFORMER_REQUIRE_CUDA();
  torch::manual_seed(63);
  const torch::Tensor x = torch::randn({96, 512}).cuda();
  const torch::Tensor w = (torch::randn({256, 512}) * 0.05).cuda();
  FusedLinearOptions o;
  o.bias = torch::randn({256}).cuda();
  o.norm_weight = torch::ones({512}).cuda();
  o.residual = torch::randn({96, 256}).cuda();
  o.activation = FusedActivation::kGelu;
  const int64_t before = CudaFusedLinearMaxRows();
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor wd = w.to(dtype);
    SetCudaFusedLinearMaxRows(1024);
    const torch::Tensor own = FusedLinear(x, wd, o);
    SetCudaFusedLinearMaxRows(8);
    const torch::Tensor cublas = FusedLinear(x, wd, o);
    SetCudaFusedLinearMaxRows(before);
    EXPECT_TRUE(torch::allclose(own, cublas, 1e-4, 1e-4))
        << dtype << " max |diff| " << (own - cublas).abs().max().item<float>();
  }
}

// Under CudaRowInvariance() a row's output is the same bits alone, among a
// few rows, and among more rows than the own kernel's default threshold
// (where cuBLAS and tensor cores would run otherwise), in float32 and
// bfloat16, with every epilogue.
TEST(FusedLinearCudaRowInvariance, ARowHasTheSameBitsWhateverTheOtherRows) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  SetCudaFusedLinearTensorCores(true);
  torch::manual_seed(64);
  constexpr int64_t kIn = 256, kOut = 320;
  const torch::Tensor x = torch::randn({300, kIn}).cuda();
  const torch::Tensor w = (torch::randn({kOut, kIn}) * 0.05).cuda();
  const torch::Tensor bias = torch::randn({kOut}).cuda();
  const torch::Tensor gamma = (1.0 + 0.1 * torch::randn({kIn})).cuda();
  const torch::Tensor beta = (0.1 * torch::randn({kIn})).cuda();
  const torch::Tensor residual = torch::randn({300, kOut}).cuda();
  for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    const torch::Tensor wd = w.to(dtype);
    for (int mask = 0; mask < 8; ++mask) {
      const FusedLinearOptions all = Options(mask, bias, gamma, beta, residual);
      const torch::Tensor full = FusedLinear(x, wd, all);
      for (int64_t rows : {1, 3, 8, 33, 100}) {
        FusedLinearOptions some = all;
        if (some.residual.defined()) some.residual = residual.narrow(0, 7, rows).contiguous();
        const torch::Tensor part = FusedLinear(x.narrow(0, 7, rows).contiguous(), wd, some);
        EXPECT_TRUE(torch::equal(part, full.narrow(0, 7, rows)))
            << dtype << " mask " << mask << ": rows 7.." << 7 + rows
            << " differ from the same rows among 300";
      }
    }
  }
  SetCudaFusedLinearTensorCores(false);
}

}  // namespace
}  // namespace performer::kernels
