// kernels::WindowedRingAttention on CUDA (under kernels::CudaRowInvariance())
// against the CPU loop, and its own bits: a sequence fed in chunks or single
// steps, or beside other sequences, gets the bits of one call.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "kernels/cuda_row_invariance.h"
#include "kernels/windowed_ring_attention.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

struct RingShape {
  int64_t sequences, tokens, heads, dims, window;
};

class WindowedRingAttentionCudaTest : public ::testing::TestWithParam<RingShape> {};

TEST_P(WindowedRingAttentionCudaTest, MatchesTheCpuAndKeepsItsBitsHoweverFed) {
  PERFORMER_REQUIRE_CUDA();
  const ScopedCudaRowInvariance invariant(true);
  const RingShape s = GetParam();
  torch::manual_seed(91);
  const torch::Tensor q = torch::randn({s.sequences, s.tokens, s.heads, s.dims});
  const torch::Tensor k = torch::randn({s.sequences, s.tokens, s.heads, s.dims});
  const torch::Tensor v = torch::randn({s.sequences, s.tokens, s.heads, s.dims});
  const torch::Tensor angles =
      torch::arange(2 * s.window * s.dims, torch::kFloat).view({2 * s.window, s.dims}) * 0.11;
  const torch::Tensor cos = angles.cos(), sin = angles.sin();
  const torch::Tensor start = torch::arange(s.sequences, torch::kLong) * 3;
  auto rings = [&](const torch::Device& device) {
    return std::vector<torch::Tensor>{
        torch::zeros({s.sequences, s.heads, 2 * s.window, s.dims}, device),
        torch::zeros({s.sequences, s.heads, 2 * s.window, s.dims}, device)};
  };
  std::vector<torch::Tensor> host = rings(torch::kCPU), gpu = rings(torch::kCUDA);
  const torch::Tensor expected = WindowedRingAttention(q, k, v, start, host[0], host[1], cos, sin);
  const torch::Tensor all = WindowedRingAttention(q.cuda(), k.cuda(), v.cuda(), start.cuda(),
                                                  gpu[0], gpu[1], cos.cuda(), sin.cuda())
                                .cpu();
  EXPECT_TRUE(torch::allclose(all, expected, 1e-4, 1e-5))
      << "max |diff| " << (all - expected).abs().max().item<float>();
  EXPECT_TRUE(torch::equal(gpu[0].cpu(), host[0]) && torch::equal(gpu[1].cpu(), host[1]))
      << "the rings hold the raw keys and values";
  // Chunks of 5 and single steps on the GPU: the one call's bits.
  for (int64_t chunk : {int64_t{1}, int64_t{5}}) {
    std::vector<torch::Tensor> fed = rings(torch::kCUDA);
    std::vector<torch::Tensor> parts;
    for (int64_t begin = 0; begin < s.tokens; begin += chunk) {
      const int64_t n = std::min(chunk, s.tokens - begin);
      auto part = [&](const torch::Tensor& t) { return t.narrow(1, begin, n).cuda(); };
      parts.push_back(WindowedRingAttention(part(q), part(k), part(v), (start + begin).cuda(),
                                            fed[0], fed[1], cos.cuda(), sin.cuda())
                          .cpu());
    }
    EXPECT_TRUE(torch::equal(torch::cat(parts, 1), all)) << "chunks of " << chunk;
  }
  // The last sequence alone.
  const int64_t last = s.sequences - 1;
  std::vector<torch::Tensor> alone = {
      torch::zeros({1, s.heads, 2 * s.window, s.dims}, torch::kCUDA),
      torch::zeros({1, s.heads, 2 * s.window, s.dims}, torch::kCUDA)};
  auto one = [&](const torch::Tensor& t) { return t.narrow(0, last, 1).cuda(); };
  const torch::Tensor single = WindowedRingAttention(one(q), one(k), one(v), one(start), alone[0],
                                                     alone[1], cos.cuda(), sin.cuda())
                                   .cpu();
  EXPECT_TRUE(torch::equal(single, all.narrow(0, last, 1))) << "a sequence alone differs";
}

INSTANTIATE_TEST_SUITE_P(Shapes, WindowedRingAttentionCudaTest,
                         ::testing::Values(RingShape{1, 9, 1, 8, 4}, RingShape{3, 40, 2, 64, 16},
                                           RingShape{2, 130, 4, 33, 64},
                                           RingShape{4, 20, 3, 128, 256}));

TEST(WindowedRingAttentionCudaChecks, CudaRingsRunOnlyUnderRowInvariance) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor ring = torch::zeros({1, 1, 8, 4}, torch::kCUDA);
  {
    const ScopedCudaRowInvariance invariant(false);
    EXPECT_FALSE(WindowedRingAttentionSupported(ring, ring));
  }
  const ScopedCudaRowInvariance invariant(true);
  EXPECT_TRUE(WindowedRingAttentionSupported(ring, ring));
  EXPECT_FALSE(WindowedRingAttentionSupported(ring, ring.cpu()));
}

}  // namespace
}  // namespace performer::kernels
