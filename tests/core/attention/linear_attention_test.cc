// LinearAttention and CausalLinearAttention: formulas, mask rejection, the
// per-forward feature-map redraw, sequence-length handling and gradients.
#include "core/attention/linear_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/attention/causal_linear_attention.h"
#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

torch::Tensor Elu1(const torch::Tensor& x) { return torch::elu(x) + 1; }

// Dense form: A[l,s] = phi_q_l . phi_k_s * keep[s] (* [s <= l] if causal),
// out_l = sum_s A[l,s] v_s / (sum_s A[l,s] + eps).
torch::Tensor ReferenceLinear(const Qkv& x, const std::vector<int64_t>& key_lengths, bool causal) {
  const int64_t n_batch = x.queries.size(0), heads = x.queries.size(2);
  const int64_t s_len = x.keys.size(1), l_len = x.queries.size(1);
  torch::Tensor out = torch::zeros({n_batch, l_len, heads, x.values.size(3)});
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      torch::Tensor q = Elu1(x.queries.select(0, n).select(1, h));
      torch::Tensor k = Elu1(x.keys.select(0, n).select(1, h));
      torch::Tensor v = x.values.select(0, n).select(1, h);
      torch::Tensor a = q.matmul(k.t());
      a.slice(1, key_lengths[n]).zero_();
      if (causal) a = a * torch::ones({l_len, s_len}).tril();
      out.select(0, n).select(1, h).copy_(a.matmul(v) / (a.sum(1, true) + 1e-6));
    }
  }
  return out;
}

// A deterministic feature map that counts new_feature_map() calls.
class CountingFeatureMap : public FeatureMapImpl {
 public:
  explicit CountingFeatureMap(int64_t query_dims) : FeatureMapImpl(query_dims) {}
  void new_feature_map(torch::Device /*device*/) override {
    if (!frozen()) ++calls;
  }
  torch::Tensor forward(const torch::Tensor& x) override { return Elu1(x); }
  int64_t output_dims() const override { return query_dims(); }
  std::string class_name() const override { return "CountingFeatureMap"; }
  int calls = 0;
};

NamedFeatureMapFactory CountingFactory() {
  return {"CountingFeatureMap",
          [](int64_t query_dims) { return std::make_shared<CountingFeatureMap>(query_dims); }};
}

TEST(LinearAttentionTest, MatchesReferenceWithKeyLengths) {
  Qkv x = RandomQkv(2, 5, 7, 3, 4, 6);
  LinearAttentionImpl attention(4);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::Full(5, 7),
                                        Lengths({3, 5}, 5), Lengths({7, 4}, 7));
  EXPECT_TENSOR_CLOSE(out, ReferenceLinear(x, {7, 4}, false), 1e-5, 1e-5);
}

TEST(LinearAttentionTest, RejectsArbitraryMasks) {
  Qkv x = RandomQkv(1, 4, 4, 1, 2, 2);
  LinearAttentionImpl attention(2);
  try {
    attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(4), FullLengths(1, 4),
                      FullLengths(1, 4));
    FAIL() << "a causal mask was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("LinearAttention does not support arbitrary attention masks"),
        std::string::npos);
  }
}

TEST(LinearAttentionTest, RedrawsFeatureMapEveryForwardUnlessFrozen) {
  Qkv x = RandomQkv(1, 3, 3, 1, 2, 2);
  LinearAttentionImpl attention(2, CountingFactory());
  auto* counter = dynamic_cast<CountingFeatureMap*>(attention.feature_map().get());
  ASSERT_NE(counter, nullptr);
  attention.eval();
  for (int i = 0; i < 3; ++i) {
    attention.forward(x.queries, x.keys, x.values, Mask::Full(3, 3), FullLengths(1, 3),
                      FullLengths(1, 3));
  }
  EXPECT_EQ(counter->calls, 3);
  // The redraw happens before the mask check, as in the reference.
  EXPECT_THROW(attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(3),
                                 FullLengths(1, 3), FullLengths(1, 3)),
               c10::Error);
  EXPECT_EQ(counter->calls, 4);
  counter->set_frozen(true);
  attention.forward(x.queries, x.keys, x.values, Mask::Full(3, 3), FullLengths(1, 3),
                    FullLengths(1, 3));
  EXPECT_EQ(counter->calls, 4);
}

TEST(LinearAttentionTest, IntrospectionAndStateDict) {
  LinearAttentionImpl attention(8, CountingFactory(), 1e-6, "d");
  EXPECT_EQ(attention.class_name(), "LinearAttention");
  EXPECT_DOUBLE_EQ(attention.attribute("eps")->as_float(), 1e-6);
  EXPECT_EQ(attention.attribute("feature_map.__class__")->as_string(), "CountingFeatureMap");
  EXPECT_EQ(attention.attribute("event_dispatcher")->as_string(), "d");
  EXPECT_EQ(attention.feature_map()->query_dims(), 8);
  ASSERT_EQ(attention.named_children().size(), 1u);
  EXPECT_EQ(attention.named_children().keys()[0], "feature_map");
}

TEST(LinearAttentionTest, GradientsFlow) {
  Qkv x = RandomQkv(2, 4, 5, 2, 3, 3);
  LinearAttentionImpl attention(3);
  ExpectGradientsFlow(attention, x, Mask::Full(4, 5), FullLengths(2, 4), Lengths({5, 2}, 5));
}

TEST(CausalLinearAttentionTest, MatchesReferenceWithKeyLengths) {
  Qkv x = RandomQkv(2, 6, 6, 2, 4, 5, 1);
  CausalLinearAttentionImpl attention(4);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(6),
                                        FullLengths(2, 6), Lengths({6, 3}, 6));
  EXPECT_TENSOR_CLOSE(out, ReferenceLinear(x, {6, 3}, true), 1e-5, 1e-5);
}

TEST(CausalLinearAttentionTest, AcceptsOnlyLowerTriangularMasks) {
  Qkv x = RandomQkv(1, 4, 4, 1, 2, 2);
  CausalLinearAttentionImpl attention(2);
  // A FullMask holding a lower-triangular matrix passes (decided by lengths).
  const Mask as_bool = *Mask::FromBool(torch::ones({4, 4}, torch::kBool).tril());
  torch::Tensor a =
      attention.forward(x.queries, x.keys, x.values, as_bool, FullLengths(1, 4), FullLengths(1, 4));
  torch::Tensor b = attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(4),
                                      FullLengths(1, 4), FullLengths(1, 4));
  EXPECT_TRUE(torch::equal(a, b));
  try {
    attention.forward(x.queries, x.keys, x.values, Mask::Full(4, 4), FullLengths(1, 4),
                      FullLengths(1, 4));
    FAIL() << "a full mask was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "CausalLinearAttention only supports full lower triangular masks"),
              std::string::npos);
  }
}

TEST(CausalLinearAttentionTest, QueryWithOnlyPaddedKeysGivesZero) {
  Qkv x = RandomQkv(1, 4, 4, 1, 3, 2);
  CausalLinearAttentionImpl attention(3);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(4),
                                        FullLengths(1, 4), Lengths({0}, 4));
  EXPECT_TRUE(torch::equal(out, torch::zeros_like(out)));
}

TEST(CausalLinearAttentionTest, FewerQueriesThanKeysUsesTheFirstKeys) {
  Qkv x = RandomQkv(2, 3, 5, 2, 4, 3, 2);
  CausalLinearAttentionImpl attention(4);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(3),
                                        FullLengths(2, 3), FullLengths(2, 5));
  Qkv cut{x.queries, x.keys.slice(1, 0, 3), x.values.slice(1, 0, 3)};
  EXPECT_TENSOR_CLOSE(out, ReferenceLinear(cut, {3, 3}, true), 1e-5, 1e-5);
}

TEST(CausalLinearAttentionTest, MoreQueriesThanKeysAttendToAllKeys) {
  Qkv x = RandomQkv(1, 6, 4, 2, 3, 3, 4);
  CausalLinearAttentionImpl attention(3);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(6),
                                        FullLengths(1, 6), FullLengths(1, 4));
  // Causal over the 4 keys; queries 4 and 5 see all of them.
  EXPECT_TENSOR_CLOSE(out, ReferenceLinear(x, {4}, true), 1e-5, 1e-5);
}

TEST(CausalLinearAttentionTest, GradientsFlow) {
  Qkv x = RandomQkv(2, 5, 5, 2, 3, 3);
  CausalLinearAttentionImpl attention(3);
  ExpectGradientsFlow(attention, x, Mask::TriangularCausal(5), FullLengths(2, 5),
                      Lengths({5, 3}, 5));
}

}  // namespace
}  // namespace performer::testing
