// Property checks P-CIC1..P-CIC3 of ImprovedClusteredCausalAttention
// (docs/reference/fast-transformers.md §11), plus registration and
// differentiability.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/attention/improved_clustered_causal_attention.h"
#include "tests/core/attention/softmax_attention_reference.h"

namespace performer {
namespace {

using testing::AllKeptLengths;
using testing::KeepFirst;
using testing::MaxAbsDiff;
using testing::ReferenceSoftmaxAttention;

constexpr double kTolerance = 1e-5;
constexpr int64_t N = 2, L = 12, H = 3, E = 4, D = 5;

std::shared_ptr<ImprovedClusteredCausalAttentionImpl> MakeCausal(int64_t clusters, int64_t topk) {
  ImprovedClusteredAttentionOptions options;
  options.clusters = clusters;
  options.topk = topk;
  options.attention_dropout = 0.0;
  auto attention = std::make_shared<ImprovedClusteredCausalAttentionImpl>(options);
  attention->eval();
  return attention;
}

TEST(ImprovedClusteredCausalAttentionProperty, P_CIC1_TopkCoveringAllKeysIsCausalFullAttention) {
  torch::manual_seed(0);
  torch::Tensor q = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor k = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor v = torch::randn({N, L, H, D}, torch::requires_grad());
  torch::Tensor causal = torch::ones({L, L}, torch::kBool).tril();
  torch::Tensor expected =
      ReferenceSoftmaxAttention(q, k, v, 1.0 / std::sqrt(double{E}), {}, causal);
  for (int64_t clusters : {1, 3, 12}) {
    for (int64_t topk : {L, int64_t{32}}) {
      torch::Tensor out =
          MakeCausal(clusters, topk)
              ->forward(q, k, v, Mask::TriangularCausal(L), AllKeptLengths(L), AllKeptLengths(L));
      EXPECT_LE(MaxAbsDiff(out, expected), kTolerance)
          << "clusters = " << clusters << ", topk = " << topk;
      torch::Tensor w = torch::randn({N, L, H, D});
      auto grads = torch::autograd::grad({(out * w).sum()}, {q, k, v});
      auto expected_grads =
          torch::autograd::grad({(expected * w).sum()}, {q, k, v}, {}, /*retain_graph=*/true);
      for (size_t i = 0; i < 3; ++i) {
        EXPECT_LE(MaxAbsDiff(grads[i], expected_grads[i]), kTolerance) << "input " << i;
      }
    }
  }
}

TEST(ImprovedClusteredCausalAttentionProperty, P_CIC2_OutputIgnoresFutureValues) {
  torch::manual_seed(1);
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor k = torch::randn({N, L, H, E});
  torch::Tensor v = torch::randn({N, L, H, D});
  auto attention = MakeCausal(3, 3);
  auto run = [&](const torch::Tensor& values) {
    torch::manual_seed(42);  // Same clustering and top-k lists in every run.
    return attention->forward(q, k, values, Mask::TriangularCausal(L), AllKeptLengths(L),
                              AllKeptLengths(L));
  };
  torch::Tensor out = run(v);
  for (int64_t l : {0, 3, 7, 10}) {
    torch::Tensor future = torch::arange(L).gt(l).view({1, L, 1, 1});
    torch::Tensor changed = torch::where(future, torch::randn({N, L, H, D}) * 100, v);
    torch::Tensor other = run(changed);
    EXPECT_LE(MaxAbsDiff(out.narrow(1, 0, l + 1), other.narrow(1, 0, l + 1)), 0.0)
        << "position " << l;
  }
}

TEST(ImprovedClusteredCausalAttentionProperty, P_CIC3_RejectsNonCausalMasks) {
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor k = torch::randn({N, L, H, E});
  torch::Tensor v = torch::randn({N, L, H, D});
  auto attention = MakeCausal(2, 4);
  EXPECT_THROW(attention->forward(q, k, v, Mask::Full(L, L), AllKeptLengths(L), AllKeptLengths(L)),
               c10::Error);
  torch::Tensor upper = torch::ones({L, L}, torch::kBool).triu();
  EXPECT_THROW(
      attention->forward(q, k, v, *Mask::FromBool(upper), AllKeptLengths(L), AllKeptLengths(L)),
      c10::Error);
  // A FullMask holding the lower-triangular matrix is accepted (lower_triangular).
  torch::Tensor lower = torch::ones({L, L}, torch::kBool).tril();
  EXPECT_NO_THROW(
      attention->forward(q, k, v, *Mask::FromBool(lower), AllKeptLengths(L), AllKeptLengths(L)));
}

TEST(ImprovedClusteredCausalAttentionProperty, PaddingAndKeyLengthsDifferentiable) {
  torch::manual_seed(2);
  torch::Tensor q = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor k = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor v = torch::randn({N, L, H, D}, torch::requires_grad());
  torch::Tensor lengths = torch::tensor({L, int64_t{7}});
  Mask length_mask = Mask::Lengths(lengths, L);
  // topk is capped by the shortest key length: every selected key is valid.
  torch::Tensor key_keep = KeepFirst(lengths, L).view({N, L, 1, 1});
  torch::Tensor v_other = torch::where(key_keep, v.detach(), 1e3 * torch::randn({N, L, H, D}));
  auto attention = MakeCausal(3, 32);
  auto run = [&](const torch::Tensor& values) {
    torch::manual_seed(7);
    return attention->forward(q, k, values, Mask::TriangularCausal(L), length_mask, length_mask);
  };
  torch::Tensor out = run(v);
  EXPECT_TRUE(out[1].narrow(0, 7, L - 7).eq(0).all().item<bool>());
  EXPECT_LE(MaxAbsDiff(out.detach(), run(v_other)), kTolerance);
  out.pow(2).sum().backward();
  for (const torch::Tensor& t : {q, k, v}) {
    ASSERT_TRUE(t.grad().defined());
    EXPECT_TRUE(t.grad().isfinite().all().item<bool>());
    EXPECT_GT(t.grad().abs().sum().item<double>(), 0.0);
  }
}

TEST(ImprovedClusteredCausalAttentionRegistration, RegistryDefaultsAndIntrospection) {
  AttentionRegistry registry;
  ASSERT_TRUE(RegisterImprovedClusteredCausalAttention(registry).ok());
  auto created = registry.Create("causal-improved-clustered", {},
                                 {{"clusters", ParamValue(4)}, {"topk", ParamValue(8)}});
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)->class_name(), "ImprovedClusteredCausalAttention");
  EXPECT_EQ(*(*created)->attribute("clusters"), ParamValue(int64_t{4}));
  EXPECT_EQ(*(*created)->attribute("topk"), ParamValue(int64_t{8}));
  EXPECT_EQ(*(*created)->attribute("bits"), ParamValue(int64_t{63}));
  EXPECT_EQ(*(*created)->attribute("dropout.p"), ParamValue(0.1));
  EXPECT_EQ(registry.Find("causal-improved-clustered")->parameters,
            (std::vector<std::string>{"clusters", "iterations", "bits", "hash_bias", "topk",
                                      "softmax_temp", "attention_dropout", "event_dispatcher"}));
}

}  // namespace
}  // namespace performer
