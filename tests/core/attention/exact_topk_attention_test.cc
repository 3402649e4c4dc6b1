#include "core/attention/exact_topk_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "core/attention/full_attention.h"
#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

// Row by row: select the k largest masked, unscaled scores, then
// softmax(t * selected) over them.
torch::Tensor ReferenceTopK(const Qkv& x, int64_t topk, double t, const torch::Tensor& keep_ls,
                            const std::vector<int64_t>& key_lengths) {
  const int64_t n_batch = x.queries.size(0), l_len = x.queries.size(1);
  const int64_t heads = x.queries.size(2), s_len = x.keys.size(1);
  const int64_t k = std::min(topk, s_len);
  torch::Tensor out = torch::zeros({n_batch, l_len, heads, x.values.size(3)});
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t l = 0; l < l_len; ++l) {
        std::vector<std::pair<float, int64_t>> scored;
        for (int64_t s = 0; s < s_len; ++s) {
          float score = x.queries[n][l][h].dot(x.keys[n][s][h]).item<float>();
          if (!keep_ls[l][s].item<bool>() || s >= key_lengths[n]) {
            score = -std::numeric_limits<float>::infinity();
          }
          scored.emplace_back(score, s);
        }
        std::sort(scored.begin(), scored.end(), std::greater<>());
        torch::Tensor selected = torch::empty({k});
        for (int64_t j = 0; j < k; ++j) selected[j] = scored[j].first;
        torch::Tensor a = torch::softmax(selected * t, 0);
        for (int64_t j = 0; j < k; ++j) {
          if (!std::isfinite(scored[j].first)) continue;
          out[n][l][h] += a[j] * x.values[n][scored[j].second][h];
        }
      }
    }
  }
  return out;
}

TEST(ExactTopKAttentionTest, MatchesReference) {
  Qkv x = RandomQkv(2, 5, 8, 2, 4, 3);
  torch::Tensor keep = torch::rand({5, 8}) > 0.2;
  keep.select(1, 0).fill_(true);
  ExactTopKAttentionImpl attention(3, std::nullopt, 0.0);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, *Mask::FromBool(keep),
                                        FullLengths(2, 5), Lengths({8, 5}, 8));
  EXPECT_TENSOR_CLOSE(out, ReferenceTopK(x, 3, 0.5, keep, {8, 5}), 1e-5, 1e-5);
}

TEST(ExactTopKAttentionTest, TemperatureScalesTheMaskedScores) {
  // The -inf of the dropped entries is added before the temperature is
  // applied, as in the reference: with a negative temperature and topk < S it
  // turns into +inf and every row is NaN; with topk >= S nothing is dropped.
  Qkv x = RandomQkv(1, 4, 7, 2, 3, 2, 9);
  const Mask full = Mask::Full(4, 7);
  ExactTopKAttentionImpl all_keys(7, -1.0, 0.0);
  torch::Tensor out =
      all_keys.forward(x.queries, x.keys, x.values, full, FullLengths(1, 4), FullLengths(1, 7));
  EXPECT_TENSOR_CLOSE(out, ReferenceTopK(x, 7, -1.0, torch::ones({4, 7}, torch::kBool), {7}), 1e-5,
                      1e-5);
  ExactTopKAttentionImpl two_keys(2, -1.0, 0.0);
  out = two_keys.forward(x.queries, x.keys, x.values, full, FullLengths(1, 4), FullLengths(1, 7));
  EXPECT_TRUE(torch::isnan(out).all().item<bool>());
}

TEST(ExactTopKAttentionTest, TopKAtLeastSEqualsFullAttention) {
  Qkv x = RandomQkv(2, 4, 5, 2, 4, 3, 2);
  ExactTopKAttentionImpl topk(100, std::nullopt, 0.0);  // k = min(100, S)
  FullAttentionImpl full(std::nullopt, 0.0);
  const Mask causal_4x5 = *Mask::FromBool(torch::ones({4, 5}, torch::kBool).tril());
  torch::Tensor a =
      topk.forward(x.queries, x.keys, x.values, causal_4x5, FullLengths(2, 4), Lengths({5, 3}, 5));
  torch::Tensor b =
      full.forward(x.queries, x.keys, x.values, causal_4x5, FullLengths(2, 4), Lengths({5, 3}, 5));
  EXPECT_TENSOR_CLOSE(a, b, 1e-6, 1e-5);
}

TEST(ExactTopKAttentionTest, MaskedKeysAreNeverSelectedWhenEnoughRemain) {
  Qkv x = RandomQkv(1, 3, 6, 1, 2, 2, 4);
  x.keys.slice(1, 4).mul_(100.0);  // Padded keys would otherwise win.
  ExactTopKAttentionImpl attention(2, std::nullopt, 0.0);
  torch::Tensor a = attention.forward(x.queries, x.keys, x.values, Mask::Full(3, 6),
                                      FullLengths(1, 3), Lengths({4}, 6));
  Qkv changed = x;
  changed.values = x.values.clone();
  changed.values.slice(1, 4).add_(5.0);
  torch::Tensor b = attention.forward(changed.queries, changed.keys, changed.values,
                                      Mask::Full(3, 6), FullLengths(1, 3), Lengths({4}, 6));
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(ExactTopKAttentionTest, TemperatureZeroDropoutEvalAndGradients) {
  Qkv x = RandomQkv(2, 4, 6, 2, 4, 3);
  const Mask full = Mask::Full(4, 6);
  ExactTopKAttentionImpl unset(3, std::nullopt, 0.0);
  ExactTopKAttentionImpl zero(3, 0.0, 0.7);
  zero.eval();
  EXPECT_TRUE(torch::equal(
      unset.forward(x.queries, x.keys, x.values, full, FullLengths(2, 4), FullLengths(2, 6)),
      zero.forward(x.queries, x.keys, x.values, full, FullLengths(2, 4), FullLengths(2, 6))));
  ExpectGradientsFlow(unset, x, full, FullLengths(2, 4), Lengths({6, 4}, 6));
  EXPECT_EQ(zero.attribute("topk")->as_int(), 3);
  EXPECT_DOUBLE_EQ(zero.attribute("softmax_temp")->as_float(), 0.0);
  EXPECT_DOUBLE_EQ(zero.attribute("dropout.p")->as_float(), 0.7);
  EXPECT_EQ(zero.class_name(), "ExactTopKAttention");
}

}  // namespace
}  // namespace performer::testing
