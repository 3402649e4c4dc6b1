// The chunkwise prefill kernel of kernels/cuda/causal_linear_prefill_cuda.cu
// run on the host (cuda_emulation.h): float32 (SIMT) and bfloat16 / float16
// (tensor cores) against the CPU op, one pass and parallel segments, with and
// without an initial state, ragged last chunks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/causal_linear_prefill.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"
#include "tests/testing/scaled_error.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

using testing::ScaledError;

struct Case {
  torch::ScalarType dtype;
  int64_t batch_heads, length, features, values;
  bool initial;
};

std::string Name(const Case& c) {
  return std::string(c.dtype == torch::kFloat      ? "fp32"
                     : c.dtype == torch::kBFloat16 ? "bf16"
                                                   : "fp16") +
         " B" + std::to_string(c.batch_heads) + " L" + std::to_string(c.length) + " M" +
         std::to_string(c.features) + " E" + std::to_string(c.values) +
         (c.initial ? " with S0" : "");
}

TEST(CausalLinearPrefillEmulationTest, MatchesTheCpuInEveryDtypeAndSchedule) {
  const Case cases[] = {
      {torch::kFloat, 2, 1, 16, 9, false},      {torch::kFloat, 2, 65, 24, 17, true},
      {torch::kFloat, 1, 300, 16, 9, false},    {torch::kBFloat16, 2, 63, 32, 17, true},
      {torch::kBFloat16, 1, 700, 32, 17, true}, {torch::kHalf, 2, 129, 16, 33, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Name(c));
    torch::manual_seed(c.length * 7 + c.features);
    const int64_t b = c.batch_heads, l = c.length, m = c.features, e = c.values;
    // Features of a feature map: positive, about 1.
    const torch::Tensor q = (torch::rand({1, b, l, m}) + 0.05).to(c.dtype);
    const torch::Tensor k = (torch::rand({1, b, l, m}) + 0.05).to(c.dtype);
    const torch::Tensor v = torch::randn({1, b, l, e}).to(c.dtype);
    const torch::Tensor s0 = c.initial ? torch::randn({1, b, m, e}) : torch::Tensor();
    const emulated::PrefillDtype dtype = c.dtype == torch::kFloat ? emulated::PrefillDtype::kFloat32
                                         : c.dtype == torch::kBFloat16
                                             ? emulated::PrefillDtype::kBFloat16
                                             : emulated::PrefillDtype::kFloat16;
    const int64_t workspace_floats =
        emulated::CausalLinearPrefillWorkspaceFloats(dtype, b, l, m, e);
    std::vector<float> workspace(static_cast<size_t>(std::max<int64_t>(workspace_floats, 1)));
    torch::Tensor out = torch::full({1, b, l, e}, -7.0f);
    torch::Tensor final_state = torch::full({1, b, m, e}, -7.0f);
    const char* error = emulated::CausalLinearPrefillForward(
        dtype, q.data_ptr(), k.data_ptr(), v.data_ptr(), c.initial ? s0.data_ptr<float>() : nullptr,
        out.data_ptr<float>(), final_state.data_ptr<float>(), workspace.data(), workspace_floats, b,
        l, m, e, nullptr);
    ASSERT_EQ(error, nullptr) << error;
    // The reference in float32 from the same (rounded) inputs.
    const CausalLinearPrefillResult expected =
        CausalLinearPrefill(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat), s0, 16);
    const double tolerance = c.dtype == torch::kFloat      ? 1e-5
                             : c.dtype == torch::kBFloat16 ? 2e-2
                                                           : 5e-3;
    EXPECT_LT(ScaledError(out, expected.out), tolerance);
    EXPECT_LT(ScaledError(final_state, expected.final_state), tolerance);
  }
}

TEST(CausalLinearPrefillEmulationTest, LongSequencesRunInSegments) {
  // The cases above that split: one sequence of 300 (fp32) or 700 (bf16)
  // tokens alone would leave most SMs idle.
  EXPECT_GT(
      emulated::CausalLinearPrefillWorkspaceFloats(emulated::PrefillDtype::kFloat32, 1, 300, 16, 9),
      0);
  EXPECT_GT(emulated::CausalLinearPrefillWorkspaceFloats(emulated::PrefillDtype::kBFloat16, 1, 700,
                                                         32, 17),
            0);
}

}  // namespace
}  // namespace performer::kernels
