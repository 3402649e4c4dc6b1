// AFTSimpleAttention and AFTFullAttention against channel-wise loops of the
// reference formulas (including the prefix-normalised causal quirk and the
// multiplied position bias), mask rejection, parameters and gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/attention/aft_full_attention.h"
#include "core/attention/aft_simple_attention.h"
#include "core/io/state_dict.h"
#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

// Per (n, h, e), in float64. key_lengths mask k' with -inf.
torch::Tensor ReferenceAftSimple(const Qkv& x, const std::vector<int64_t>& key_lengths,
                                 bool causal) {
  torch::Tensor q = x.queries.to(torch::kFloat64), k = x.keys.to(torch::kFloat64);
  torch::Tensor v = x.values.to(torch::kFloat64);
  const int64_t n_batch = q.size(0), l_len = q.size(1), heads = q.size(2), dims = q.size(3);
  torch::Tensor out = torch::zeros({n_batch, l_len, heads, dims}, torch::kFloat64);
  for (int64_t n = 0; n < n_batch; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t e = 0; e < dims; ++e) {
        torch::Tensor kk = k.index({n, torch::indexing::Slice(), h, e}).clone();  // (S)
        kk.slice(0, key_lengths[n]).fill_(-std::numeric_limits<double>::infinity());
        torch::Tensor vv = v.index({n, torch::indexing::Slice(), h, e});
        torch::Tensor gate = torch::sigmoid(q.index({n, torch::indexing::Slice(), h, e}));
        if (causal) {
          torch::Tensor ex = torch::exp(kk - kk.max());
          torch::Tensor w = ex / ex.cumsum(0);
          out.index_put_({n, torch::indexing::Slice(), h, e}, gate * (w * vv).cumsum(0));
        } else {
          out.index_put_({n, torch::indexing::Slice(), h, e},
                         gate * (torch::softmax(kk, 0) * vv).sum());
        }
      }
    }
  }
  return out.to(torch::kFloat32);
}

TEST(AFTSimpleAttentionTest, AllOnesMaskWithKeyLengths) {
  Qkv x = RandomQkv(2, 5, 6, 2, 3, 3);
  AFTSimpleAttentionImpl attention;
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::Full(5, 6),
                                        FullLengths(2, 5), Lengths({6, 2}, 6));
  EXPECT_TENSOR_CLOSE(out, ReferenceAftSimple(x, {6, 2}, false), 1e-6, 1e-5);
}

TEST(AFTSimpleAttentionTest, CausalBranchIsPrefixNormalised) {
  Qkv x = RandomQkv(2, 6, 6, 2, 4, 4, 1);
  AFTSimpleAttentionImpl attention;
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(6),
                                        FullLengths(2, 6), FullLengths(2, 6));
  EXPECT_TENSOR_CLOSE(out, ReferenceAftSimple(x, {6, 6}, true), 1e-6, 1e-5);
}

TEST(AFTSimpleAttentionTest, RejectsGeneralMasksAndDimensionMismatch) {
  Qkv x = RandomQkv(1, 4, 4, 1, 3, 3);
  AFTSimpleAttentionImpl attention;
  torch::Tensor keep = torch::ones({4, 4}, torch::kBool);
  keep[0][3] = false;
  try {
    attention.forward(x.queries, x.keys, x.values, *Mask::FromBool(keep), FullLengths(1, 4),
                      FullLengths(1, 4));
    FAIL() << "a general mask was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "You cannot use general attention masks with AFTSimpleAttention"),
              std::string::npos);
  }
  Qkv y = RandomQkv(1, 4, 4, 1, 3, 2);
  try {
    attention.forward(y.queries, y.keys, y.values, Mask::Full(4, 4), FullLengths(1, 4),
                      FullLengths(1, 4));
    FAIL() << "E != D was accepted";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "AFT requires that queries, keys and values have the same dimensionality"),
              std::string::npos);
  }
}

TEST(AFTSimpleAttentionTest, GradientsFlow) {
  Qkv x = RandomQkv(2, 4, 4, 2, 3, 3);
  AFTSimpleAttentionImpl attention;
  ExpectGradientsFlow(attention, x, Mask::Full(4, 4), FullLengths(2, 4), FullLengths(2, 4));
  ExpectGradientsFlow(attention, x, Mask::TriangularCausal(4), FullLengths(2, 4),
                      FullLengths(2, 4));
}

TEST(AFTFullAttentionTest, MatchesReference) {
  Qkv x = RandomQkv(2, 4, 5, 2, 3, 3, 2);
  AFTFullAttentionImpl attention(8, 2);
  torch::Tensor out = attention.forward(x.queries, x.keys, x.values, Mask::Full(4, 5),
                                        FullLengths(2, 4), FullLengths(2, 5));
  torch::Tensor w = attention.u().slice(0, 0, 4).mm(attention.v().slice(0, 0, 5).t()).detach();
  torch::Tensor expected = torch::zeros_like(out);
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t l = 0; l < 4; ++l) {
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t e = 0; e < 3; ++e) {
          torch::Tensor z = x.keys.index({n, torch::indexing::Slice(), h, e}) * w[l];  // (S)
          torch::Tensor weighted =
              (torch::softmax(z, 0) * x.values.index({n, torch::indexing::Slice(), h, e})).sum();
          expected[n][l][h][e] = torch::sigmoid(x.queries[n][l][h][e]) * weighted;
        }
      }
    }
  }
  EXPECT_TENSOR_CLOSE(out.detach(), expected, 1e-6, 1e-5);
}

TEST(AFTFullAttentionTest, ParametersInitialisationAndLimits) {
  torch::manual_seed(0);
  AFTFullAttentionImpl attention;  // 1024 x 64
  EXPECT_EQ(attention.u().sizes(), (std::vector<int64_t>{1024, 64}));
  EXPECT_EQ(attention.v().sizes(), (std::vector<int64_t>{1024, 64}));
  const double std_u = attention.u().std().item<double>();
  EXPECT_NEAR(std_u, 0.01, 0.001);
  EXPECT_NEAR(attention.u().mean().item<double>(), 0.0, 0.001);
  std::map<std::string, torch::Tensor> state = io::StateDict(attention);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state.count("u"), 1u);
  EXPECT_EQ(state.count("v"), 1u);
  EXPECT_EQ(attention.attribute("max_sequence_length")->as_int(), 1024);

  AFTFullAttentionImpl small(4, 2);
  Qkv x = RandomQkv(1, 5, 5, 1, 2, 2);
  EXPECT_THROW(small.forward(x.queries, x.keys, x.values, Mask::Full(5, 5), FullLengths(1, 5),
                             FullLengths(1, 5)),
               c10::Error);
  Qkv y = RandomQkv(1, 3, 3, 1, 2, 3);
  EXPECT_THROW(small.forward(y.queries, y.keys, y.values, Mask::Full(3, 3), FullLengths(1, 3),
                             FullLengths(1, 3)),
               c10::Error);
}

TEST(AFTFullAttentionTest, GradientsReachThePositionBias) {
  Qkv x = RandomQkv(1, 3, 4, 2, 2, 2);
  AFTFullAttentionImpl attention(6, 3);
  ExpectGradientsFlow(attention, x, Mask::Full(3, 4), FullLengths(1, 3), FullLengths(1, 4));
  ASSERT_TRUE(attention.u().grad().defined());
  EXPECT_GT(attention.u().grad().abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(attention.u().grad().slice(0, 3), torch::zeros({3, 3})));
  EXPECT_GT(attention.v().grad().slice(0, 0, 4).abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace performer::testing
