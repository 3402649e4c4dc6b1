// CUDA chunkwise prefill against the CPU kernel (its reference).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "kernels/causal_linear_prefill.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/scaled_error.h"

namespace performer::kernels {
namespace {

struct Shape {
  int64_t n, h, l, m, e;
};

std::string Name(const ::testing::TestParamInfo<Shape>& info) {
  const Shape& s = info.param;
  return "N" + std::to_string(s.n) + "H" + std::to_string(s.h) + "L" + std::to_string(s.l) + "M" +
         std::to_string(s.m) + "E" + std::to_string(s.e);
}

using testing::ScaledError;

class CausalLinearPrefillCudaTest : public ::testing::TestWithParam<Shape> {};

TEST_P(CausalLinearPrefillCudaTest, Float32MatchesCpu) {
  PERFORMER_REQUIRE_CUDA();
  const Shape s = GetParam();
  torch::manual_seed(21);
  const torch::Tensor q = torch::rand({s.n, s.h, s.l, s.m});
  const torch::Tensor k = torch::rand({s.n, s.h, s.l, s.m});
  const torch::Tensor v = torch::randn({s.n, s.h, s.l, s.e});
  const torch::Tensor s0 = torch::randn({s.n, s.h, s.m, s.e});
  torch::NoGradGuard no_grad;
  for (bool with_state : {false, true}) {
    SCOPED_TRACE(with_state ? "initial state" : "zero state");
    const torch::Tensor init = with_state ? s0 : torch::Tensor();
    const CausalLinearPrefillResult expected = CausalLinearPrefill(q, k, v, init);
    const CausalLinearPrefillResult got =
        CausalLinearPrefill(q.cuda(), k.cuda(), v.cuda(), with_state ? s0.cuda() : torch::Tensor());
    EXPECT_EQ(got.out.scalar_type(), torch::kFloat);
    // Relative to the output scale: the sums run over up to M + C terms of
    // both signs, so single elements near zero carry the rounding of large
    // partial sums on both devices.
    EXPECT_LT(ScaledError(got.out.cpu(), expected.out), 1e-4);
    EXPECT_LT(ScaledError(got.final_state.cpu(), expected.final_state), 1e-4);
  }
}

// bfloat16 / float16 inputs on tensor cores against the CPU prefill of the
// same (rounded) inputs in float32: the products round P = Qc Kc^T and the
// state to the input dtype (8 / 11 significant bits), so the error is held
// to 2e-2 (bf16) / 5e-3 (fp16) of the output scale.
TEST_P(CausalLinearPrefillCudaTest, HalfPrecisionMatchesCpu) {
  PERFORMER_REQUIRE_CUDA();
  const Shape s = GetParam();
  torch::manual_seed(22);
  torch::NoGradGuard no_grad;
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kHalf}) {
    SCOPED_TRACE(dtype == torch::kBFloat16 ? "bfloat16" : "float16");
    const double tolerance = dtype == torch::kBFloat16 ? 2e-2 : 5e-3;
    const torch::Tensor q = torch::rand({s.n, s.h, s.l, s.m}).to(dtype);
    const torch::Tensor k = torch::rand({s.n, s.h, s.l, s.m}).to(dtype);
    const torch::Tensor v = torch::randn({s.n, s.h, s.l, s.e}).to(dtype);
    const torch::Tensor s0 = torch::randn({s.n, s.h, s.m, s.e});
    const CausalLinearPrefillResult expected =
        CausalLinearPrefill(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat), s0);
    const CausalLinearPrefillResult got =
        CausalLinearPrefill(q.cuda(), k.cuda(), v.cuda(), s0.cuda());
    EXPECT_EQ(got.out.scalar_type(), torch::kFloat);
    EXPECT_LT(ScaledError(got.out.cpu(), expected.out), tolerance);
    // The state accumulates in float32 from exact products of the inputs.
    EXPECT_LT(ScaledError(got.final_state.cpu(), expected.final_state), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CausalLinearPrefillCudaTest,
                         ::testing::Values(Shape{1, 1, 1, 1, 1}, Shape{1, 1, 63, 16, 16},
                                           Shape{2, 3, 65, 33, 65}, Shape{1, 2, 200, 64, 64},
                                           Shape{64, 1, 37, 20, 9}, Shape{1, 8, 1000, 256, 65},
                                           Shape{2, 1, 130, 512, 17}, Shape{1, 1, 0, 8, 4},
                                           Shape{1, 2, 3001, 64, 33}),
                         Name);

TEST(CausalLinearPrefillCudaChecks, RefusesGradientsOnCuda) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor q = torch::rand({1, 1, 4, 8}, torch::kCUDA).requires_grad_();
  const torch::Tensor v = torch::randn({1, 1, 4, 3}, torch::kCUDA);
  EXPECT_THROW(CausalLinearPrefill(q, q.detach(), v), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
