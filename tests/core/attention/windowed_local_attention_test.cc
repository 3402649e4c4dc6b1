#include "core/attention/windowed_local_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace performer::models {
namespace {

constexpr int64_t kHeads = 2, kDim = 8, kWindow = 5, kLength = 41;

// Prefill, then chunks of every alignment to the windows (inside one window,
// across several, longer than the ring): each chunk's outputs are the full
// forward's rows, and the ring afterwards holds the last 2w keys and values.
TEST(LocalAttentionTest, ExtendEqualsTheFullForward) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(4);
  WindowedLocalAttention attention(kDim, kWindow, /*causal=*/true);
  attention->to(torch::kDouble);
  const torch::Tensor q = torch::randn({1, kHeads, kLength, kDim}, torch::kDouble);
  const torch::Tensor k = torch::randn({1, kHeads, kLength, kDim}, torch::kDouble);
  const torch::Tensor v = torch::randn({1, kHeads, kLength, kDim}, torch::kDouble);
  const torch::Tensor full = attention(q, k, v);
  torch::Tensor ring_k = torch::zeros({1, kHeads, 2 * kWindow, kDim}, torch::kDouble);
  torch::Tensor ring_v = torch::zeros_like(ring_k);
  const int64_t prompt = 3;
  attention->InitRing(k.narrow(2, 0, prompt), v.narrow(2, 0, prompt), ring_k, ring_v);
  int64_t done = prompt;
  for (int64_t chunk : {1, 2, 4, 7, 13, 1, 10}) {
    SCOPED_TRACE("chunk of " + std::to_string(chunk) + " from " + std::to_string(done));
    torch::Tensor out = attention->Extend(q.narrow(2, done, chunk), k.narrow(2, done, chunk),
                                          v.narrow(2, done, chunk), done, ring_k, ring_v);
    EXPECT_LE((out - full.narrow(2, done, chunk)).abs().max().item<double>(), 1e-12);
    done += chunk;
  }
  ASSERT_EQ(done, kLength);
  for (int64_t position = kLength - 2 * kWindow; position < kLength; ++position) {
    const int64_t entry = position % (2 * kWindow);
    EXPECT_TRUE(torch::equal(ring_k.select(2, entry), k.select(2, position))) << position;
    EXPECT_TRUE(torch::equal(ring_v.select(2, entry), v.select(2, position))) << position;
  }
}

TEST(LocalAttentionTest, ExtendNeedsCausalAttentionAndOneSequence) {
  torch::NoGradGuard no_grad;
  WindowedLocalAttention non_causal(kDim, kWindow, /*causal=*/false);
  torch::Tensor x = torch::randn({1, kHeads, 3, kDim});
  torch::Tensor ring = torch::zeros({1, kHeads, 2 * kWindow, kDim});
  torch::Tensor ring_v = ring.clone();
  EXPECT_THROW(non_causal->Extend(x, x, x, 0, ring, ring_v), c10::Error);
  WindowedLocalAttention causal(kDim, kWindow, /*causal=*/true);
  torch::Tensor two = torch::randn({2, kHeads, 3, kDim});
  EXPECT_THROW(causal->Extend(two, two, two, 0, ring, ring_v), c10::Error);
}

// The rotary tables PrepareForDecoding keeps are the ones a step would make:
// float32 steps (the CPU ring loop) give the same bits prepared or not, and
// preparing again after new frequencies are loaded follows them.
TEST(LocalAttentionTest, PreparedRingTablesGiveTheSameBits) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  constexpr int64_t kRows = 3, kSteps = 2 * kWindow + 3;
  WindowedLocalAttention per_call(kDim, kWindow, /*causal=*/true);
  WindowedLocalAttention prepared(kDim, kWindow, /*causal=*/true);
  const auto steps_equal = [&] {
    torch::Tensor ring_k = torch::zeros({kRows, kHeads, 2 * kWindow, kDim});
    torch::Tensor ring_v = torch::zeros_like(ring_k);
    torch::Tensor prepared_k = ring_k.clone(), prepared_v = ring_v.clone();
    for (int64_t p = 0; p < kSteps; ++p) {
      const torch::Tensor q = torch::randn({kRows, kHeads, kDim});
      const torch::Tensor k = torch::randn({kRows, kHeads, kDim});
      const torch::Tensor v = torch::randn({kRows, kHeads, kDim});
      const torch::Tensor positions = torch::full({kRows}, p, torch::kLong);
      const torch::Tensor expected = per_call->Step(q, k, v, positions, ring_k, ring_v);
      const torch::Tensor got = prepared->Step(q, k, v, positions, prepared_k, prepared_v);
      if (!torch::equal(expected, got)) return false;
    }
    return true;
  };
  prepared->PrepareForDecoding();
  EXPECT_TRUE(steps_equal());
  for (WindowedLocalAttention* attention : {&per_call, &prepared}) {
    (*attention)->named_buffers()["rel_pos.inv_freq"].mul_(3.0);
  }
  prepared->PrepareForDecoding();
  EXPECT_TRUE(steps_equal());
}

}  // namespace
}  // namespace performer::models
