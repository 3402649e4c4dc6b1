#include "core/attention/local_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

// Slot by slot, with the reference's -1e24 fill and temperature after
// masking; computed in float64 from float32 inputs.
torch::Tensor ReferenceLocal(const Qkv& x, int64_t context, double t, const Mask& attn_mask,
                             const std::vector<int64_t>& key_lengths) {
  const int64_t n_batch = x.queries.size(0), l_len = x.queries.size(1);
  const int64_t heads = x.queries.size(2), s_len = x.keys.size(1);
  const torch::Tensor finite = attn_mask.additive_matrix_finite();
  torch::Tensor out = torch::zeros({n_batch, l_len, heads, x.values.size(3)}, torch::kFloat64);
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t l = 0; l < l_len; ++l) {
        torch::Tensor slots = torch::empty({context}, torch::kFloat64);
        for (int64_t k = 0; k < context; ++k) {
          const int64_t s = l - context / 2 + k;
          if (s >= 0 && s < key_lengths[n]) {
            // The float32 sum, as the kernel forms it (q.k - 1e24 == -1e24).
            const float score =
                x.queries[n][l][h].dot(x.keys[n][s][h]).item<float>() + finite[l][s].item<float>();
            slots[k] = static_cast<double>(score);
          } else {
            slots[k] = static_cast<double>(-1e24f);
          }
        }
        torch::Tensor a = torch::softmax(slots * t, 0);
        for (int64_t k = 0; k < context; ++k) {
          const int64_t s = l - context / 2 + k;
          if (s < 0 || s >= s_len) continue;
          out[n][l][h] += a[k] * x.values[n][s][h].to(torch::kFloat64);
        }
      }
    }
  }
  return out.to(torch::kFloat32);
}

TEST(LocalAttentionTest, OddContextWithKeyLengths) {
  Qkv x = RandomQkv(2, 9, 9, 2, 4, 3);
  LocalAttentionImpl attention(5, std::nullopt, 0.0);
  const Mask full = Mask::Full(9, 9);
  torch::Tensor out =
      attention.forward(x.queries, x.keys, x.values, full, FullLengths(2, 9), Lengths({9, 4}, 9));
  EXPECT_TENSOR_CLOSE(out, ReferenceLocal(x, 5, 0.5, full, {9, 4}), 1e-5, 1e-5);
}

TEST(LocalAttentionTest, EvenContextIsAsymmetricAndCausal) {
  Qkv x = RandomQkv(2, 8, 8, 2, 4, 3, 5);
  LocalAttentionImpl attention(4, 0.3, 0.0);
  const Mask causal = Mask::TriangularCausal(8);
  torch::Tensor out =
      attention.forward(x.queries, x.keys, x.values, causal, FullLengths(2, 8), FullLengths(2, 8));
  EXPECT_TENSOR_CLOSE(out, ReferenceLocal(x, 4, 0.3, causal, {8, 8}), 1e-5, 1e-5);
  // Context 4 = keys l-2 .. l+1: changing value 5 changes queries 4..7 only.
  LocalAttentionImpl unmasked(4, 0.3, 0.0);
  Qkv y = x;
  y.values = x.values.clone();
  y.values.select(1, 5).add_(1.0);
  const Mask full = Mask::Full(8, 8);
  torch::Tensor a =
      unmasked.forward(x.queries, x.keys, x.values, full, FullLengths(2, 8), FullLengths(2, 8));
  torch::Tensor b =
      unmasked.forward(y.queries, y.keys, y.values, full, FullLengths(2, 8), FullLengths(2, 8));
  EXPECT_TRUE(torch::equal(a.slice(1, 0, 4), b.slice(1, 0, 4)));
  EXPECT_FALSE(torch::allclose(a.select(1, 4), b.select(1, 4)));
  EXPECT_FALSE(torch::allclose(a.select(1, 7), b.select(1, 7)));
}

TEST(LocalAttentionTest, RowWithoutValidKeyIsUniformNotNaN) {
  Qkv x = RandomQkv(1, 6, 6, 1, 3, 2, 7);
  LocalAttentionImpl attention(3, std::nullopt, 0.0);
  // Keys 0..1 valid; query 4 (window 3..5) has none.
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::Full(6, 6),
                                        FullLengths(1, 6), Lengths({2}, 6));
  EXPECT_FALSE(torch::isnan(out).any().item<bool>());
  torch::Tensor uniform = x.values.slice(1, 3, 6).sum(1) / 3.0;
  EXPECT_TENSOR_CLOSE(out.select(1, 4), uniform, 1e-6, 1e-5);
  // Query 5 (window 4..6): slot 6 is out of range and contributes nothing.
  EXPECT_TENSOR_CLOSE(out.select(1, 5), x.values.slice(1, 4, 6).sum(1) / 3.0, 1e-6, 1e-5);
  EXPECT_TENSOR_CLOSE(out, ReferenceLocal(x, 3, 1 / std::sqrt(3.0), Mask::Full(6, 6), {2}), 1e-5,
                      1e-5);
}

TEST(LocalAttentionTest, TemperatureZeroMeansDefault) {
  Qkv x = RandomQkv(1, 5, 5, 2, 4, 2);
  LocalAttentionImpl unset(3, std::nullopt, 0.0);
  LocalAttentionImpl zero(3, 0.0, 0.0);
  const Mask full = Mask::Full(5, 5);
  EXPECT_TRUE(torch::equal(
      unset.forward(x.queries, x.keys, x.values, full, FullLengths(1, 5), FullLengths(1, 5)),
      zero.forward(x.queries, x.keys, x.values, full, FullLengths(1, 5), FullLengths(1, 5))));
}

TEST(LocalAttentionTest, KeyLengthsMustBeALengthMask) {
  Qkv x = RandomQkv(2, 3, 3, 1, 2, 2);
  LocalAttentionImpl attention(3, std::nullopt, 0.0);
  torch::Tensor not_lengths = torch::tensor({{true, false, true}, {true, true, true}});
  EXPECT_THROW(attention.forward(x.queries, x.keys, x.values, Mask::Full(3, 3), FullLengths(2, 3),
                                 *Mask::FromBool(not_lengths)),
               c10::Error);
}

TEST(LocalAttentionTest, GradientsFlowAndIntrospection) {
  Qkv x = RandomQkv(2, 6, 6, 2, 3, 3);
  LocalAttentionImpl attention(3, std::nullopt, 0.0);
  ExpectGradientsFlow(attention, x, Mask::Full(6, 6), FullLengths(2, 6), Lengths({6, 4}, 6));
  EXPECT_EQ(attention.class_name(), "LocalAttention");
  EXPECT_EQ(attention.attribute("local_context")->as_int(), 3);
  EXPECT_TRUE(attention.attribute("softmax_temp")->is_none());
  EXPECT_DOUBLE_EQ(attention.attribute("dropout.p")->as_float(), 0.0);
}

}  // namespace
}  // namespace performer::testing
