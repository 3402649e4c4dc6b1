#include "core/attention/full_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

// softmax_s(t q.k + attn_add + key_add) v, written per (n, h) with explicit
// masking (dropped entries are -inf).
torch::Tensor ReferenceFull(const Qkv& x, double t, const torch::Tensor& keep_ls,
                            const std::vector<int64_t>& key_lengths) {
  const int64_t n_batch = x.queries.size(0), heads = x.queries.size(2);
  torch::Tensor out = torch::zeros({n_batch, x.queries.size(1), heads, x.values.size(3)});
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      torch::Tensor q = x.queries.select(0, n).select(1, h);  // (L, E)
      torch::Tensor k = x.keys.select(0, n).select(1, h);     // (S, E)
      torch::Tensor v = x.values.select(0, n).select(1, h);   // (S, D)
      torch::Tensor scores = t * q.matmul(k.t());
      torch::Tensor keep = keep_ls.clone();
      keep.slice(1, key_lengths[n]).fill_(false);
      scores = scores.masked_fill(keep.logical_not(), -std::numeric_limits<float>::infinity());
      out.select(0, n).select(1, h).copy_(torch::softmax(scores, -1).matmul(v));
    }
  }
  return out;
}

TEST(FullAttentionTest, MatchesReferenceWithMasks) {
  Qkv x = RandomQkv(2, 5, 6, 3, 4, 7);
  torch::Tensor keep = torch::rand({5, 6}) > 0.3;
  keep.select(1, 0).fill_(true);  // Every row keeps at least one key.
  FullAttentionImpl attention(0.7, 0.0);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, *Mask::FromBool(keep),
                                        FullLengths(2, 5), Lengths({6, 3}, 6));
  EXPECT_TENSOR_CLOSE(out, ReferenceFull(x, 0.7, keep, {6, 3}), 1e-5, 1e-5);
}

TEST(FullAttentionTest, DefaultTemperatureAndZeroMeanNone) {
  Qkv x = RandomQkv(2, 4, 4, 2, 9, 3);
  const Mask full = Mask::Full(4, 4);
  FullAttentionImpl unset(std::nullopt, 0.0);
  FullAttentionImpl zero(0.0, 0.0);
  torch::Tensor a =
      unset.forward(x.queries, x.keys, x.values, full, FullLengths(2, 4), FullLengths(2, 4));
  torch::Tensor b =
      zero.forward(x.queries, x.keys, x.values, full, FullLengths(2, 4), FullLengths(2, 4));
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_TENSOR_CLOSE(a, ReferenceFull(x, 1.0 / 3.0, torch::ones({4, 4}, torch::kBool), {4, 4}),
                      1e-5, 1e-5);
  EXPECT_TRUE(zero.attribute("softmax_temp")->is_float());
  EXPECT_TRUE(unset.attribute("softmax_temp")->is_none());
}

TEST(FullAttentionTest, CausalMaskAndIgnoredQueryLengths) {
  Qkv x = RandomQkv(2, 5, 5, 2, 4, 4, 3);
  FullAttentionImpl attention(std::nullopt, 0.0);
  const Mask causal = Mask::TriangularCausal(5);
  torch::Tensor a =
      attention.forward(x.queries, x.keys, x.values, causal, FullLengths(2, 5), FullLengths(2, 5));
  torch::Tensor b =
      attention.forward(x.queries, x.keys, x.values, causal, Lengths({2, 1}, 5), FullLengths(2, 5));
  EXPECT_TRUE(torch::equal(a, b));  // query_lengths never changes the output.
  EXPECT_TENSOR_CLOSE(a, ReferenceFull(x, 0.5, causal.bool_matrix(), {5, 5}), 1e-5, 1e-5);
  // Row 0 sees only key 0.
  EXPECT_TENSOR_CLOSE(a.select(1, 0), x.values.select(1, 0), 1e-6, 0.0);
}

TEST(FullAttentionTest, FullyMaskedRowIsNaN) {
  Qkv x = RandomQkv(1, 3, 3, 1, 2, 2);
  torch::Tensor keep = torch::ones({3, 3}, torch::kBool);
  keep[1].fill_(false);
  FullAttentionImpl attention(std::nullopt, 0.0);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, *Mask::FromBool(keep),
                                        FullLengths(1, 3), FullLengths(1, 3));
  EXPECT_TRUE(torch::isnan(out.select(1, 1)).all().item<bool>());
  EXPECT_FALSE(torch::isnan(out.select(1, 0)).any().item<bool>());
}

TEST(FullAttentionTest, DropoutOnlyInTraining) {
  Qkv x = RandomQkv(2, 6, 6, 2, 4, 4);
  const Mask full = Mask::Full(6, 6);
  FullAttentionImpl reference(std::nullopt, 0.0);
  FullAttentionImpl dropped(std::nullopt, 0.5);
  torch::Tensor expected =
      reference.forward(x.queries, x.keys, x.values, full, FullLengths(2, 6), FullLengths(2, 6));
  dropped.eval();
  EXPECT_TRUE(torch::equal(
      dropped.forward(x.queries, x.keys, x.values, full, FullLengths(2, 6), FullLengths(2, 6)),
      expected));
  dropped.train();
  torch::manual_seed(1);
  torch::Tensor trained =
      dropped.forward(x.queries, x.keys, x.values, full, FullLengths(2, 6), FullLengths(2, 6));
  EXPECT_FALSE(torch::allclose(trained, expected));
  EXPECT_DOUBLE_EQ(dropped.attribute("dropout.p")->as_float(), 0.5);
}

TEST(FullAttentionTest, GradientsFlow) {
  Qkv x = RandomQkv(2, 4, 5, 2, 3, 3);
  FullAttentionImpl attention(std::nullopt, 0.0);
  ExpectGradientsFlow(attention, x, Mask::Full(4, 5), FullLengths(2, 4), Lengths({5, 2}, 5));
}

TEST(FullAttentionTest, Introspection) {
  FullAttentionImpl attention(std::nullopt, 0.1, "events");
  EXPECT_EQ(attention.class_name(), "FullAttention");
  EXPECT_TRUE(attention.attribute("softmax_temp")->is_none());
  EXPECT_DOUBLE_EQ(attention.attribute("dropout.p")->as_float(), 0.1);
  EXPECT_EQ(attention.attribute("dropout.__class__")->as_string(), "Dropout");
  EXPECT_EQ(attention.attribute("event_dispatcher")->as_string(), "events");
  EXPECT_FALSE(attention.attribute("nope").has_value());
  EXPECT_TRUE(attention.named_parameters().is_empty());
}

}  // namespace
}  // namespace performer::testing
