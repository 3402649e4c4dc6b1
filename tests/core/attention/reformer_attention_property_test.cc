// Property checks P-R1..P-R6 of ReformerAttention
// (docs/reference/fast-transformers.md §11 and §12 item 14), plus registration
// and differentiability.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/attention/reformer_attention.h"
#include "tests/core/attention/softmax_attention_reference.h"

namespace performer {
namespace {

using testing::AllKeptLengths;
using testing::KeepFirst;
using testing::MaxAbsDiff;
using testing::ReferenceSoftmaxAttention;

constexpr double kTolerance = 1e-5;
constexpr int64_t N = 2, L = 16, H = 3, E = 4;

std::shared_ptr<ReformerAttentionImpl> MakeReformer(int64_t chunk_size, int64_t bits,
                                                    int64_t rounds, bool masked = false) {
  ReformerAttentionOptions options;
  options.chunk_size = chunk_size;
  options.bits = bits;
  options.rounds = rounds;
  options.masked = masked;
  options.attention_dropout = 0.0;
  auto attention = std::make_shared<ReformerAttentionImpl>(options);
  attention->eval();
  return attention;
}

torch::Tensor Normalized(const torch::Tensor& q) {
  return q / torch::sqrt((q * q).sum(-1, /*keepdim=*/true));
}

TEST(ReformerAttentionProperty, P_R1_SingleChunkIsFullAttentionOverNormalizedQueries) {
  torch::manual_seed(0);
  torch::Tensor q = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor v = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor unused_keys = torch::randn({N, L, H, E});
  const double t = 1.0 / std::sqrt(double{E});
  for (bool with_lengths : {false, true}) {
    torch::Tensor lengths =
        with_lengths ? torch::tensor({int64_t{11}, L}) : torch::full({N}, L, torch::kInt64);
    Mask key_lengths = Mask::Lengths(lengths.to(torch::kInt64), L);
    torch::Tensor expected =
        ReferenceSoftmaxAttention(q, Normalized(q), v, t, KeepFirst(lengths, L));
    for (auto [bits, rounds] : {std::pair<int64_t, int64_t>{1, 1}, {4, 3}, {63, 2}}) {
      torch::Tensor out =
          MakeReformer(L, bits, rounds)
              ->forward(q, unused_keys, v, Mask::Full(L, L), AllKeptLengths(L), key_lengths);
      EXPECT_LE(MaxAbsDiff(out, expected), kTolerance)
          << "bits = " << bits << ", rounds = " << rounds << ", lengths = " << with_lengths;
      torch::Tensor w = torch::randn({N, L, H, E});
      auto grads = torch::autograd::grad({(out * w).sum()}, {q, v});
      auto expected_grads =
          torch::autograd::grad({(expected * w).sum()}, {q, v}, {}, /*retain_graph=*/true);
      EXPECT_LE(MaxAbsDiff(grads[0], expected_grads[0]), kTolerance);
      EXPECT_LE(MaxAbsDiff(grads[1], expected_grads[1]), kTolerance);
    }
  }
}

TEST(ReformerAttentionProperty, P_R1_SingleChunkWithAttentionMask) {
  torch::manual_seed(1);
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor v = torch::randn({N, L, H, E});
  torch::Tensor lengths = torch::tensor({L, int64_t{9}});
  torch::Tensor causal = torch::ones({L, L}, torch::kBool).tril();
  torch::Tensor out = MakeReformer(L, 5, 2)->forward(q, q, v, Mask::TriangularCausal(L),
                                                     AllKeptLengths(L), Mask::Lengths(lengths, L));
  torch::Tensor expected = ReferenceSoftmaxAttention(
      q, Normalized(q), v, 1.0 / std::sqrt(double{E}), KeepFirst(lengths, L), causal);
  EXPECT_LE(MaxAbsDiff(out, expected), kTolerance);
}

TEST(ReformerAttentionProperty, P_R2_KeysArgumentIsIgnored) {
  torch::manual_seed(2);
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor v = torch::randn({N, L, H, E});
  auto attention = MakeReformer(4, 3, 2);
  auto run = [&](const torch::Tensor& keys) {
    torch::manual_seed(42);
    return attention->forward(q, keys, v, Mask::Full(L, L), AllKeptLengths(L), AllKeptLengths(L));
  };
  EXPECT_TRUE(torch::equal(run(torch::randn({N, L, H, E})), run(torch::randn({N, 5, H, 2}))));
}

TEST(ReformerAttentionProperty, P_R3_MaskedSingleChunkRemovesTheDiagonal) {
  torch::manual_seed(3);
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor v = torch::randn({N, L, H, E});
  torch::Tensor out =
      MakeReformer(L, 6, 3, /*masked=*/true)
          ->forward(q, q, v, Mask::Full(L, L), AllKeptLengths(L), AllKeptLengths(L));
  torch::Tensor off_diagonal = torch::eye(L).logical_not();
  torch::Tensor expected =
      ReferenceSoftmaxAttention(q, Normalized(q), v, 1.0 / std::sqrt(double{E}), {}, off_diagonal);
  EXPECT_LE(MaxAbsDiff(out, expected), kTolerance);
}

TEST(ReformerAttentionProperty, P_R4_ValidRowsIgnorePaddedValues) {
  torch::manual_seed(4);
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor v = torch::randn({N, L, H, E});
  torch::Tensor lengths = torch::tensor({int64_t{9}, int64_t{13}});
  torch::Tensor keep = KeepFirst(lengths, L).view({N, L, 1, 1});
  torch::Tensor v_other = torch::where(keep, v, 1e3 * torch::randn({N, L, H, E}));
  for (bool masked : {false, true}) {
    auto attention = MakeReformer(4, 2, 3, masked);
    auto run = [&](const torch::Tensor& values) {
      torch::manual_seed(42);
      return attention->forward(q, q, values, Mask::Full(L, L), AllKeptLengths(L),
                                Mask::Lengths(lengths, L));
    };
    torch::Tensor valid = keep.to(torch::kFloat);
    EXPECT_LE(MaxAbsDiff(run(v) * valid, run(v_other) * valid), 0.0) << "masked = " << masked;
  }
}

TEST(ReformerAttentionProperty, P_R5_RowsAreConvexCombinationsOfValues) {
  torch::manual_seed(5);
  torch::Tensor q = torch::randn({N, L, H, E});
  torch::Tensor v = torch::randn({N, L, H, E});
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t chunk : {2, 4, 8}) {
    torch::Tensor out =
        MakeReformer(chunk, 3, 4)
            ->forward(q, q, v, Mask::Full(L, L), AllKeptLengths(L), AllKeptLengths(L));
    EXPECT_TRUE(out.ge(v.amin(1, true) - kTolerance).all().item<bool>());
    EXPECT_TRUE(out.le(v.amax(1, true) + kTolerance).all().item<bool>());
    // With key lengths, the valid rows combine valid values only.
    torch::Tensor lengths = torch::tensor({int64_t{5}, int64_t{12}});
    torch::Tensor keep = KeepFirst(lengths, L).view({N, L, 1, 1});
    torch::Tensor masked_out =
        MakeReformer(chunk, 3, 4)
            ->forward(q, q, v, Mask::Full(L, L), AllKeptLengths(L), Mask::Lengths(lengths, L));
    torch::Tensor low = v.masked_fill(keep.logical_not(), inf).amin(1, true);
    torch::Tensor high = v.masked_fill(keep.logical_not(), -inf).amax(1, true);
    EXPECT_TRUE(masked_out.ge(low - kTolerance).logical_or(keep.logical_not()).all().item<bool>());
    EXPECT_TRUE(masked_out.le(high + kTolerance).logical_or(keep.logical_not()).all().item<bool>());
  }
}

TEST(ReformerAttentionProperty, P_R6_RejectsUnsupportedShapes) {
  torch::Tensor q = torch::randn({N, L, H, E});
  auto attention = MakeReformer(5, 2, 1);  // 16 % 5 != 0
  EXPECT_THROW(attention->forward(q, q, q, Mask::Full(L, L), AllKeptLengths(L), AllKeptLengths(L)),
               c10::Error);
  auto fits = MakeReformer(4, 2, 1);
  torch::Tensor wide_values = torch::randn({N, L, H, E + 1});  // D != E
  EXPECT_THROW(
      fits->forward(q, q, wide_values, Mask::Full(L, L), AllKeptLengths(L), AllKeptLengths(L)),
      c10::Error);
  torch::Tensor long_values = torch::randn({N, L + 4, H, E});  // S != L
  EXPECT_THROW(fits->forward(q, q, long_values, Mask::Full(L, L + 4), AllKeptLengths(L),
                             AllKeptLengths(L + 4)),
               c10::Error);
  EXPECT_THROW(MakeReformer(0, 2, 1), c10::Error);
  EXPECT_THROW(MakeReformer(4, 2, 0), c10::Error);
}

TEST(ReformerAttentionProperty, MultiChunkIsDifferentiableAndFinite) {
  torch::manual_seed(6);
  torch::Tensor q = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor k = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor v = torch::randn({N, L, H, E}, torch::requires_grad());
  torch::Tensor out = MakeReformer(4, 63, 4, /*masked=*/true)
                          ->forward(q, k, v, Mask::Full(L, L), AllKeptLengths(L),
                                    Mask::Lengths(torch::tensor({L, int64_t{6}}), L));
  EXPECT_TRUE(out.isfinite().all().item<bool>());
  out.pow(2).sum().backward();
  for (const torch::Tensor& t : {q, v}) {
    ASSERT_TRUE(t.grad().defined());
    EXPECT_TRUE(t.grad().isfinite().all().item<bool>());
    EXPECT_GT(t.grad().abs().sum().item<double>(), 0.0);
  }
  EXPECT_FALSE(k.grad().defined());  // shared-QK: keys are not used
}

TEST(ReformerAttentionRegistration, RegistryDefaultsAndIntrospection) {
  AttentionRegistry registry;
  ASSERT_TRUE(RegisterReformerAttention(registry).ok());
  auto created = registry.Create("reformer", {}, {});
  ASSERT_TRUE(created.ok()) << created.status();
  const AttentionPtr& attention = *created;
  EXPECT_EQ(attention->class_name(), "ReformerAttention");
  EXPECT_EQ(*attention->attribute("chunk_size"), ParamValue(int64_t{32}));
  EXPECT_EQ(*attention->attribute("bits"), ParamValue(int64_t{63}));
  EXPECT_EQ(*attention->attribute("rounds"), ParamValue(int64_t{4}));
  EXPECT_EQ(*attention->attribute("masked"), ParamValue(false));
  EXPECT_TRUE(attention->attribute("softmax_temp")->is_none());
  EXPECT_EQ(*attention->attribute("dropout.p"), ParamValue(0.1));
  EXPECT_EQ(registry.Find("reformer")->parameters,
            (std::vector<std::string>{"chunk_size", "bits", "rounds", "masked", "softmax_temp",
                                      "attention_dropout", "event_dispatcher"}));
  EXPECT_TRUE(registry.Spec("masked")->Equals(*OptionalSpec(BoolSpec(), false)));
  EXPECT_TRUE(registry.Spec("chunk_size")->Equals(*OptionalSpec(IntSpec(), int64_t{32})));
  EXPECT_TRUE(registry.Spec("rounds")->Equals(*OptionalSpec(IntSpec(), int64_t{4})));
  // Constructor defaults differ from the registry's (bits 8).
  EXPECT_EQ(ReformerAttentionOptions().bits, 8);
}

}  // namespace
}  // namespace performer
