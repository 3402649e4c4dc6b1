// Helpers shared by the attention unit tests: seeded random inputs, full
// length masks, and a gradient check.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/attention/attention.h"
#include "core/masks.h"

namespace performer::testing {

struct Qkv {
  torch::Tensor queries;  // (N, L, H, E)
  torch::Tensor keys;     // (N, S, H, E)
  torch::Tensor values;   // (N, S, H, D)
};

inline Qkv RandomQkv(int64_t n, int64_t l, int64_t s, int64_t h, int64_t e, int64_t d,
                     uint64_t seed = 0) {
  torch::manual_seed(seed);
  return {torch::randn({n, l, h, e}), torch::randn({n, s, h, e}), torch::randn({n, s, h, d})};
}

inline Mask FullLengths(int64_t batch, int64_t length) {
  return Mask::Lengths(torch::full({batch}, length, torch::kInt64), length);
}

inline Mask Lengths(const std::vector<int64_t>& lengths, int64_t max_len) {
  return Mask::Lengths(torch::tensor(lengths, torch::kInt64), max_len);
}

// Backpropagates sum(out * w) for a fixed random w and checks that queries,
// keys and values all receive finite, non-zero gradients.
inline void ExpectGradientsFlow(AttentionImpl& attention, const Qkv& x, const Mask& attn_mask,
                                const Mask& query_lengths, const Mask& key_lengths) {
  torch::Tensor q = x.queries.clone().requires_grad_(true);
  torch::Tensor k = x.keys.clone().requires_grad_(true);
  torch::Tensor v = x.values.clone().requires_grad_(true);
  torch::Tensor out = attention.forward(q, k, v, attn_mask, query_lengths, key_lengths);
  torch::Tensor weights = torch::randn(out.sizes());
  (out * weights).sum().backward();
  for (const torch::Tensor* t : {&q, &k, &v}) {
    ASSERT_TRUE(t->grad().defined());
    EXPECT_TRUE(torch::isfinite(t->grad()).all().item<bool>());
    EXPECT_GT(t->grad().abs().sum().item<double>(), 0.0);
  }
}

}  // namespace performer::testing
