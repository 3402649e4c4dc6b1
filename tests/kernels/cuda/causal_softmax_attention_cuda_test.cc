// kernels::CausalSoftmaxAttention on CUDA under kernels::CudaRowInvariance()
// (kernels/cuda/causal_softmax_attention_cuda.cu): against the CPU, and a
// token's bits the same in calls of any size and among other rows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/causal_softmax_attention.h"
#include "kernels/cuda_row_invariance.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

TEST(CausalSoftmaxAttentionCudaTest, MatchesTheCpuAndKeepsATokensBitsHoweverFed) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  const int64_t rows = 4, tokens = 40, heads = 4, e = 64, d = 48, pool = 200;
  torch::manual_seed(44);
  const torch::Tensor q = torch::randn({rows, tokens, heads, e});
  const torch::Tensor keys = torch::randn({rows, pool, heads, e}).narrow(1, 0, 190);
  const torch::Tensor values = torch::randn({rows, pool, heads, d}).narrow(1, 0, 190);
  const torch::Tensor last = torch::tensor({0, 37, 100, 150}, torch::kLong).unsqueeze(1) +
                             torch::arange(tokens, torch::kLong).unsqueeze(0);
  const torch::Tensor qc = q.cuda(), kc = keys.cuda(), vc = values.cuda(), lc = last.cuda();
  ASSERT_TRUE(CausalSoftmaxAttentionSupported(kc, vc));
  const torch::Tensor all = CausalSoftmaxAttention(qc, kc, vc, lc, 0.125).cpu();
  const torch::Tensor cpu = CausalSoftmaxAttention(q, keys, values, last, 0.125);
  EXPECT_TRUE(torch::allclose(all, cpu, 1e-5, 1e-6))
      << "max |diff| " << (all - cpu).abs().max().item<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t first : {0, 13, 39}) {
      const torch::Tensor one =
          CausalSoftmaxAttention(qc.narrow(0, r, 1).narrow(1, first, 1), kc.narrow(0, r, 1),
                                 vc.narrow(0, r, 1), lc.narrow(0, r, 1).narrow(1, first, 1), 0.125)
              .cpu();
      EXPECT_TRUE(torch::equal(one[0][0], all[r][first])) << "row " << r << ", token " << first;
    }
  }
}

TEST(CausalSoftmaxAttentionCudaTest, IsOnlySupportedUnderRowInvariance) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance off(false);
  const torch::Tensor keys = torch::rand({1, 4, 1, 8}, torch::kCUDA);
  EXPECT_FALSE(CausalSoftmaxAttentionSupported(keys, keys));
}

}  // namespace
}  // namespace performer::kernels
