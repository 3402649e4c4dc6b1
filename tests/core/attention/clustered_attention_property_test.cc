// Property checks P-C1..P-C5 of ClusteredAttention
// (docs/reference/fast-transformers.md §11), plus registration, introspection
// and differentiability.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/attention/clustered_attention.h"
#include "core/attention/improved_clustered_attention.h"
#include "core/attention/improved_clustered_causal_attention.h"
#include "core/attention/reformer_attention.h"
#include "tests/core/attention/softmax_attention_reference.h"

namespace performer {
namespace {

using testing::AllKeptLengths;
using testing::KeepFirst;
using testing::MaxAbsDiff;
using testing::ReferenceSoftmaxAttention;

constexpr double kTolerance = 1e-5;
constexpr int64_t N = 2, L = 10, H = 3, E = 4, S = 7, D = 5;

std::shared_ptr<ClusteredAttentionImpl> MakeClustered(int64_t clusters, int64_t bits = 32) {
  ClusteredAttentionOptions options;
  options.clusters = clusters;
  options.bits = bits;
  options.attention_dropout = 0.0;
  auto attention = std::make_shared<ClusteredAttentionImpl>(options);
  attention->eval();
  return attention;
}

// Mean of the first lengths[n] queries of each (n, h), repeated over L.
torch::Tensor MeanValidQueries(const torch::Tensor& q, const torch::Tensor& lengths) {
  torch::Tensor keep = KeepFirst(lengths, q.size(1)).to(q.scalar_type()).view({N, L, 1, 1});
  torch::Tensor mean = (q * keep).sum(1, true) / lengths.to(q.scalar_type()).view({N, 1, 1, 1});
  return mean.expand_as(q);
}

TEST(ClusteredAttentionProperty, P_C1_OneClusterIsFullAttentionAtTheMeanQuery) {
  torch::manual_seed(0);
  torch::Tensor q = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor k = torch::randn({N, S, H, E}, torch::requires_grad());
  torch::Tensor v = torch::randn({N, S, H, D}, torch::requires_grad());
  torch::Tensor q_lengths = torch::tensor({L, int64_t{6}});
  torch::Tensor k_lengths = torch::tensor({S, int64_t{4}});
  auto attention = MakeClustered(1);
  torch::Tensor out = attention->forward(q, k, v, Mask::Full(L, S), Mask::Lengths(q_lengths, L),
                                         Mask::Lengths(k_lengths, S));
  const double t = 1.0 / std::sqrt(double{E});
  torch::Tensor expected =
      ReferenceSoftmaxAttention(MeanValidQueries(q, q_lengths), k, v, t, KeepFirst(k_lengths, S));
  torch::Tensor valid = KeepFirst(q_lengths, L).view({N, L, 1, 1}).to(torch::kFloat);
  EXPECT_LE(MaxAbsDiff(out * valid, expected * valid), kTolerance);
  // Rows past query_lengths are exactly 0.
  EXPECT_TRUE(out[1].narrow(0, 6, L - 6).eq(0).all().item<bool>());

  // Gradients agree as well: the centroid is the mean, differentiably.
  torch::Tensor w = torch::randn({N, L, H, D}) * valid;
  auto grads = torch::autograd::grad({(out * w).sum()}, {q, k, v});
  auto expected_grads = torch::autograd::grad({(expected * w).sum()}, {q, k, v});
  for (size_t i = 0; i < 3; ++i) EXPECT_LE(MaxAbsDiff(grads[i], expected_grads[i]), kTolerance);
}

TEST(ClusteredAttentionProperty, P_C2_IdenticalQueriesGiveFullAttentionForAnyClusters) {
  torch::manual_seed(1);
  torch::Tensor q = torch::randn({N, 1, H, E}).expand({N, L, H, E});
  torch::Tensor k = torch::randn({N, S, H, E});
  torch::Tensor v = torch::randn({N, S, H, D});
  torch::Tensor k_lengths = torch::tensor({int64_t{5}, S});
  for (int64_t clusters : {1, 3, 10}) {
    torch::Tensor out = MakeClustered(clusters)->forward(
        q, k, v, Mask::Full(L, S), AllKeptLengths(L), Mask::Lengths(k_lengths, S));
    torch::Tensor expected =
        ReferenceSoftmaxAttention(q, k, v, 1.0 / std::sqrt(double{E}), KeepFirst(k_lengths, S));
    EXPECT_LE(MaxAbsDiff(out, expected), kTolerance) << "clusters = " << clusters;
  }
}

TEST(ClusteredAttentionProperty, P_C3_AtMostClustersDistinctRows) {
  torch::manual_seed(2);
  const int64_t length = 16;
  torch::Tensor q = torch::randn({N, length, H, E});
  torch::Tensor k = torch::randn({N, S, H, E});
  torch::Tensor v = torch::randn({N, S, H, D});
  for (int64_t clusters : {1, 2, 3}) {
    torch::Tensor out = MakeClustered(clusters)->forward(q, k, v, Mask::Full(length, S),
                                                         AllKeptLengths(length), AllKeptLengths(S));
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t h = 0; h < H; ++h) {
        torch::Tensor rows = out[n].select(1, h);  // (L, D)
        const int64_t distinct = std::get<0>(torch::unique_dim(rows, 0)).size(0);
        EXPECT_LE(distinct, clusters);
      }
    }
  }
}

TEST(ClusteredAttentionProperty, P_C4_PaddedKeysGetZeroWeightAndRowsAreConvex) {
  torch::manual_seed(3);
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor k = torch::randn({N, S, H, E});
  torch::Tensor v = torch::randn({N, S, H, D});
  torch::Tensor k_lengths = torch::tensor({int64_t{3}, int64_t{6}});
  torch::Tensor key_keep = KeepFirst(k_lengths, S).view({N, S, 1, 1});
  torch::Tensor v_other = torch::where(key_keep, v, 1e3 * torch::randn({N, S, H, D}));
  auto attention = MakeClustered(3);
  auto run = [&](const torch::Tensor& values) {
    torch::manual_seed(42);  // Same hyperplanes and centroids in both runs.
    return attention->forward(q, k, values, Mask::Full(L, S), AllKeptLengths(L),
                              Mask::Lengths(k_lengths, S));
  };
  torch::Tensor out = run(v);
  EXPECT_LE(MaxAbsDiff(out, run(v_other)), kTolerance);
  // Convex combinations of the valid values, per feature.
  const double inf = std::numeric_limits<double>::infinity();
  torch::Tensor low = v.masked_fill(key_keep.logical_not(), inf).amin(1, true);
  torch::Tensor high = v.masked_fill(key_keep.logical_not(), -inf).amax(1, true);
  EXPECT_TRUE(out.ge(low - kTolerance).all().item<bool>());
  EXPECT_TRUE(out.le(high + kTolerance).all().item<bool>());
}

TEST(ClusteredAttentionProperty, P_C5_RejectsBadMasksAndTooManyClusters) {
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor k = torch::randn({N, S, H, E});
  torch::Tensor v = torch::randn({N, S, H, D});
  Mask full_q = AllKeptLengths(L);
  Mask full_k = AllKeptLengths(S);
  torch::Tensor triangle = torch::ones({L, S}, torch::kBool).tril();
  EXPECT_THROW(MakeClustered(2)->forward(q, k, v, *Mask::FromBool(triangle), full_q, full_k),
               c10::Error);
  EXPECT_THROW(MakeClustered(L + 1)->forward(q, k, v, Mask::Full(L, S), full_q, full_k),
               c10::Error);
  torch::Tensor holes = torch::ones({N, L}, torch::kBool);
  holes[0][3] = false;  // not a run of kept positions
  EXPECT_THROW(MakeClustered(2)->forward(q, k, v, Mask::Full(L, S), *Mask::FromBool(holes), full_k),
               c10::Error);
  EXPECT_THROW(MakeClustered(2)->forward(q, k, v, Mask::Full(L, S), AllKeptLengths(S), full_k),
               c10::Error);  // query_lengths must be N x L
  EXPECT_THROW(MakeClustered(0), c10::Error);
  EXPECT_THROW(MakeClustered(2, 64), c10::Error);
}

TEST(ClusteredAttentionProperty, ReproducibleUnderManualSeedAndDifferentiable) {
  torch::Tensor q = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor k = torch::randn({N, S, H, E}, torch::requires_grad());
  torch::Tensor v = torch::randn({N, S, H, D}, torch::requires_grad());
  auto attention = MakeClustered(3, 63);
  auto run = [&] {
    torch::manual_seed(5);
    return attention->forward(q, k, v, Mask::Full(L, S),
                              Mask::Lengths(torch::tensor({L, int64_t{7}})),
                              Mask::Lengths(torch::tensor({S, int64_t{2}}), S));
  };
  torch::Tensor a = run();
  EXPECT_TRUE(torch::equal(a, run()));
  a.pow(2).sum().backward();
  for (const torch::Tensor& x : {q, k, v}) {
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(x.grad().isfinite().all().item<bool>());
    EXPECT_GT(x.grad().abs().sum().item<double>(), 0.0);
  }
}

TEST(ClusteredAttentionRegistration, RegistryDefaultsAndIntrospection) {
  AttentionRegistry registry;
  ASSERT_TRUE(RegisterClusteredAttention(registry).ok());
  // The whole family shares one parameter table without conflicts.
  ASSERT_TRUE(RegisterImprovedClusteredAttention(registry).ok());
  ASSERT_TRUE(RegisterReformerAttention(registry).ok());
  ASSERT_TRUE(RegisterImprovedClusteredCausalAttention(registry).ok());
  EXPECT_FALSE(RegisterClusteredAttention(registry).ok());  // already registered

  auto missing = registry.Create("clustered", {}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "Invalid value None for parameter 'clusters'");

  auto created = registry.Create("clustered", {}, {{"clusters", ParamValue(3)}});
  ASSERT_TRUE(created.ok()) << created.status();
  const AttentionPtr& attention = *created;
  EXPECT_EQ(attention->class_name(), "ClusteredAttention");
  EXPECT_EQ(*attention->attribute("clusters"), ParamValue(int64_t{3}));
  EXPECT_EQ(*attention->attribute("iterations"), ParamValue(int64_t{10}));
  EXPECT_EQ(*attention->attribute("bits"), ParamValue(int64_t{63}));
  EXPECT_EQ(*attention->attribute("hash_bias"), ParamValue(true));
  EXPECT_TRUE(attention->attribute("softmax_temp")->is_none());
  EXPECT_EQ(*attention->attribute("dropout.p"), ParamValue(0.1));
  EXPECT_EQ(registry.Find("clustered")->parameters,
            (std::vector<std::string>{"clusters", "iterations", "bits", "hash_bias", "softmax_temp",
                                      "attention_dropout", "event_dispatcher"}));
  EXPECT_TRUE(registry.Spec("iterations")->Equals(*OptionalSpec(IntSpec(), int64_t{10})));
  EXPECT_TRUE(registry.Spec("clusters")->Equals(*IntSpec()));
  auto bad = registry.Create("clustered", {}, {{"clusters", ParamValue(0)}});
  EXPECT_FALSE(bad.ok());
  auto temp = registry.Create("clustered", {},
                              {{"clusters", ParamValue(2)}, {"softmax_temp", ParamValue(0.5)}});
  ASSERT_TRUE(temp.ok());
  EXPECT_EQ(*(*temp)->attribute("softmax_temp"), ParamValue(0.5));
  // A registered submodule named as in PyTorch.
  EXPECT_EQ((*temp)->named_children().size(), 1u);
  EXPECT_EQ((*temp)->named_children().begin()->key(), "dropout");
}

}  // namespace
}  // namespace performer
