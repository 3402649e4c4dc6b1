// Non-causal linear attention of kernels/cuda/linear_attention_cuda.cu run
// on the host (cuda_emulation.h) against the CPU op.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/linear_attention.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

TEST(LinearAttentionEmulationTest, MatchesTheCpu) {
  // L 37 queries, S 45 keys, M 40, E 19: ragged tiles everywhere.
  torch::manual_seed(19);
  const torch::Tensor q = torch::rand({2, 3, 37, 40}) + 0.05;
  const torch::Tensor k = torch::rand({2, 3, 45, 40}) + 0.05;
  const torch::Tensor v = torch::randn({2, 3, 45, 19});
  torch::Tensor kv = torch::empty({6, 40, 20}), out = torch::empty({2, 3, 37, 19});
  const char* error = cuda_emulated::LinearAttentionForwardCuda(
      q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), kv.data_ptr<float>(),
      out.data_ptr<float>(), 6, 37, 45, 40, 19, 1e-6f, nullptr);
  ASSERT_EQ(error, nullptr) << error;
  const torch::Tensor expected = LinearAttentionForward(q, k, v, 1e-6);
  EXPECT_TRUE(torch::allclose(out, expected, 1e-5, 1e-6))
      << "max |diff| " << (out - expected).abs().max().item<float>();
}

}  // namespace
}  // namespace performer::kernels
