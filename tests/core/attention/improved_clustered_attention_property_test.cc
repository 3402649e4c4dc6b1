// Property checks P-IC1, P-IC2, P-IC3 (as fixed) and P-IC4 of
// ImprovedClusteredAttention (docs/reference/fast-transformers.md §11), plus
// registration, introspection and differentiability.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/attention/clustered_attention.h"
#include "core/attention/improved_clustered_attention.h"
#include "tests/core/attention/softmax_attention_reference.h"

namespace performer {
namespace {

using testing::AllKeptLengths;
using testing::KeepFirst;
using testing::MaxAbsDiff;
using testing::ReferenceSoftmaxAttention;

constexpr double kTolerance = 1e-5;
constexpr int64_t N = 2, L = 10, H = 3, E = 4, S = 7, D = 5;

std::shared_ptr<ImprovedClusteredAttentionImpl> MakeImproved(int64_t clusters, int64_t topk) {
  ImprovedClusteredAttentionOptions options;
  options.clusters = clusters;
  options.topk = topk;
  options.attention_dropout = 0.0;
  auto attention = std::make_shared<ImprovedClusteredAttentionImpl>(options);
  attention->eval();
  return attention;
}

struct Inputs {
  torch::Tensor q, k, v;
};

Inputs RandomInputs(int64_t keys = S, bool requires_grad = false) {
  auto options = torch::TensorOptions().requires_grad(requires_grad);
  return {torch::randn({N, L, H, E}, options), torch::randn({N, keys, H, E}, options),
          torch::randn({N, keys, H, D}, options)};
}

TEST(ImprovedClusteredAttentionProperty, P_IC1_TopkCoveringAllKeysIsFullAttention) {
  torch::manual_seed(0);
  Inputs x = RandomInputs(S, /*requires_grad=*/true);
  const double t = 1.0 / std::sqrt(double{E});
  torch::Tensor expected = ReferenceSoftmaxAttention(x.q, x.k, x.v, t);
  for (int64_t clusters : {1, 3, 10}) {
    torch::Tensor out =
        MakeImproved(clusters, 32)
            ->forward(x.q, x.k, x.v, Mask::Full(L, S), AllKeptLengths(L), AllKeptLengths(S));
    EXPECT_LE(MaxAbsDiff(out, expected), kTolerance) << "clusters = " << clusters;
    // The bottom part carries no mass, so gradients are those of full attention.
    torch::Tensor w = torch::randn({N, L, H, D});
    auto grads = torch::autograd::grad({(out * w).sum()}, {x.q, x.k, x.v});
    auto expected_grads =
        torch::autograd::grad({(expected * w).sum()}, {x.q, x.k, x.v}, {}, /*retain_graph=*/true);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_LE(MaxAbsDiff(grads[i], expected_grads[i]), kTolerance) << "input " << i;
    }
  }
}

TEST(ImprovedClusteredAttentionProperty, P_IC2_PaddedQueriesGetZeroValidRowsStayExact) {
  torch::manual_seed(1);
  Inputs x = RandomInputs();
  torch::Tensor q_lengths = torch::tensor({int64_t{4}, L});
  torch::Tensor out = MakeImproved(3, 32)->forward(x.q, x.k, x.v, Mask::Full(L, S),
                                                   Mask::Lengths(q_lengths, L), AllKeptLengths(S));
  EXPECT_TRUE(out[0].narrow(0, 4, L - 4).eq(0).all().item<bool>());
  torch::Tensor expected = ReferenceSoftmaxAttention(x.q, x.k, x.v, 1.0 / std::sqrt(double{E}));
  EXPECT_LE(MaxAbsDiff(out[0].narrow(0, 0, 4), expected[0].narrow(0, 0, 4)), kTolerance);
  EXPECT_LE(MaxAbsDiff(out[1], expected[1]), kTolerance);
}

// The reference masks the exact top-k scores by (head 0, cluster 0)'s list;
// here each slot is masked by its own key index, so P-IC1 holds with key
// lengths too, on every head and for any number of clusters.
TEST(ImprovedClusteredAttentionProperty, P_IC3_Fixed_KeyLengthsMaskedByKeyIndexOnEveryHead) {
  torch::manual_seed(2);
  Inputs x = RandomInputs();
  torch::Tensor k_lengths = torch::tensor({int64_t{3}, int64_t{5}});
  torch::Tensor q_lengths = torch::tensor({L, int64_t{8}});
  torch::Tensor expected =
      ReferenceSoftmaxAttention(x.q, x.k, x.v, 1.0 / std::sqrt(double{E}), KeepFirst(k_lengths, S));
  torch::Tensor valid = KeepFirst(q_lengths, L).view({N, L, 1, 1}).to(torch::kFloat);
  for (int64_t clusters : {1, 3}) {
    for (int64_t topk : {5, 7, 32}) {  // >= every valid key count
      torch::Tensor out = MakeImproved(clusters, topk)
                              ->forward(x.q, x.k, x.v, Mask::Full(L, S),
                                        Mask::Lengths(q_lengths, L), Mask::Lengths(k_lengths, S));
      EXPECT_LE(MaxAbsDiff(out * valid, expected * valid), kTolerance)
          << "clusters = " << clusters << ", topk = " << topk;
    }
  }
}

TEST(ImprovedClusteredAttentionProperty, P_IC4_SmallTopkRowsAreConvexAndIgnorePaddedKeys) {
  torch::manual_seed(3);
  const int64_t keys = 12;
  Inputs x = RandomInputs(keys);
  torch::Tensor k_lengths = torch::tensor({int64_t{9}, int64_t{2}});  // 2 < topk: padding in top-k
  torch::Tensor key_keep = KeepFirst(k_lengths, keys).view({N, keys, 1, 1});
  torch::Tensor v_other = torch::where(key_keep, x.v, 1e3 * torch::randn({N, keys, H, D}));
  auto attention = MakeImproved(3, 3);
  auto run = [&](const torch::Tensor& values) {
    torch::manual_seed(42);
    return attention->forward(x.q, x.k, values, Mask::Full(L, keys), AllKeptLengths(L),
                              Mask::Lengths(k_lengths, keys));
  };
  torch::Tensor out = run(x.v);
  EXPECT_LE(MaxAbsDiff(out, run(v_other)), kTolerance);
  const double inf = std::numeric_limits<double>::infinity();
  torch::Tensor low = x.v.masked_fill(key_keep.logical_not(), inf).amin(1, true);
  torch::Tensor high = x.v.masked_fill(key_keep.logical_not(), -inf).amax(1, true);
  EXPECT_TRUE(out.ge(low - kTolerance).all().item<bool>());
  EXPECT_TRUE(out.le(high + kTolerance).all().item<bool>());
  // Total weight 1: with constant values the output is that constant.
  torch::Tensor ones = torch::ones({N, keys, H, D});
  EXPECT_LE(MaxAbsDiff(run(ones), torch::ones({N, L, H, D})), kTolerance);
}

TEST(ImprovedClusteredAttentionProperty, TopkZeroIsClusteredAttention) {
  torch::manual_seed(4);
  Inputs x = RandomInputs();
  torch::Tensor k_lengths = torch::tensor({int64_t{6}, S});
  torch::Tensor q_lengths = torch::tensor({L, int64_t{5}});
  ClusteredAttentionOptions options;
  options.clusters = 3;
  options.attention_dropout = 0.0;
  ClusteredAttentionImpl clustered(options);
  clustered.eval();
  torch::manual_seed(9);  // Both draw the same hyperplanes and centroids.
  torch::Tensor expected = clustered.forward(
      x.q, x.k, x.v, Mask::Full(L, S), Mask::Lengths(q_lengths, L), Mask::Lengths(k_lengths, S));
  torch::manual_seed(9);
  torch::Tensor out = MakeImproved(3, 0)->forward(
      x.q, x.k, x.v, Mask::Full(L, S), Mask::Lengths(q_lengths, L), Mask::Lengths(k_lengths, S));
  EXPECT_LE(MaxAbsDiff(out, expected), kTolerance);
}

TEST(ImprovedClusteredAttentionProperty, RejectsBadMasksAndIsDifferentiable) {
  torch::manual_seed(5);
  Inputs x = RandomInputs(S, /*requires_grad=*/true);
  torch::Tensor triangle = torch::ones({L, S}, torch::kBool).tril();
  EXPECT_THROW(MakeImproved(2, 3)->forward(x.q, x.k, x.v, *Mask::FromBool(triangle),
                                           AllKeptLengths(L), AllKeptLengths(S)),
               c10::Error);
  EXPECT_THROW(MakeImproved(L + 1, 3)->forward(x.q, x.k, x.v, Mask::Full(L, S), AllKeptLengths(L),
                                               AllKeptLengths(S)),
               c10::Error);
  EXPECT_THROW(MakeImproved(2, -1), c10::Error);
  torch::Tensor out = MakeImproved(3, 3)->forward(x.q, x.k, x.v, Mask::Full(L, S),
                                                  Mask::Lengths(torch::tensor({L, int64_t{6}})),
                                                  Mask::Lengths(torch::tensor({S, int64_t{4}}), S));
  out.pow(2).sum().backward();
  for (const torch::Tensor& t : {x.q, x.k, x.v}) {
    ASSERT_TRUE(t.grad().defined());
    EXPECT_TRUE(t.grad().isfinite().all().item<bool>());
    EXPECT_GT(t.grad().abs().sum().item<double>(), 0.0);
  }
}

TEST(ImprovedClusteredAttentionRegistration, RegistryDefaultsAndIntrospection) {
  AttentionRegistry registry;
  ASSERT_TRUE(RegisterImprovedClusteredAttention(registry).ok());
  auto created = registry.Create("improved-clustered", {}, {{"clusters", ParamValue(3)}});
  ASSERT_TRUE(created.ok()) << created.status();
  const AttentionPtr& attention = *created;
  EXPECT_EQ(attention->class_name(), "ImprovedClusteredAttention");
  EXPECT_EQ(*attention->attribute("bits"), ParamValue(int64_t{63}));
  EXPECT_EQ(*attention->attribute("topk"), ParamValue(int64_t{32}));
  EXPECT_EQ(*attention->attribute("iterations"), ParamValue(int64_t{10}));
  EXPECT_EQ(*attention->attribute("hash_bias"), ParamValue(true));
  EXPECT_TRUE(attention->attribute("softmax_temp")->is_none());
  EXPECT_EQ(*attention->attribute("dropout.p"), ParamValue(0.1));
  EXPECT_EQ(registry.Find("improved-clustered")->parameters,
            (std::vector<std::string>{"clusters", "iterations", "bits", "hash_bias", "topk",
                                      "softmax_temp", "attention_dropout", "event_dispatcher"}));
  EXPECT_TRUE(registry.Spec("topk")->Equals(*OptionalSpec(IntSpec(), int64_t{32})));
  EXPECT_TRUE(registry.Spec("attention_dropout")->Equals(*OptionalSpec(FloatSpec(), 0.1)));
  EXPECT_FALSE(registry.Create("improved-clustered", {}, {}).ok());
}

}  // namespace
}  // namespace performer
