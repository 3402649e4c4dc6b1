// The user-defined attention of examples/custom_attention: "square"
// attention with weights (temp * q.k)^2, multiplicatively masked and
// normalised by their sum over the keys. It is registered with its own
// parameters, built through AttentionBuilder, and checked against a direct
// computation, on a fresh registry and on the global one; its recurrent twin
// (one step at a time, and the slot form a server decodes with) against the
// batch form under a causal mask.
#include "examples/custom_attention/quadratic_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/attention/attention_registries.h"
#include "core/builders/attention_builder.h"
#include "core/recurrent/state_pool.h"
#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

using examples::QuadraticAttentionImpl;
using examples::RecurrentQuadraticAttentionImpl;
using examples::RegisterQuadraticAttention;

// Direct computation for one (n, h): w[l,s] = (t q_l.k_s)^2 [s < len],
// out_l = sum_s w[l,s] v_s / (sum_s w[l,s] + eps).
torch::Tensor ReferenceSquare(const Qkv& x, double t, const std::vector<int64_t>& key_lengths) {
  torch::Tensor out =
      torch::zeros({x.queries.size(0), x.queries.size(1), x.queries.size(2), x.values.size(3)});
  for (int64_t n = 0; n < x.queries.size(0); ++n) {
    for (int64_t h = 0; h < x.queries.size(2); ++h) {
      torch::Tensor q = x.queries.select(0, n).select(1, h);
      torch::Tensor k = x.keys.select(0, n).select(1, h);
      torch::Tensor v = x.values.select(0, n).select(1, h);
      torch::Tensor w = (q.matmul(k.t()) * t).pow(2);
      w.slice(1, key_lengths[n]).zero_();
      out.select(0, n).select(1, h).copy_(w.matmul(v) / (w.sum(1, true) + 1e-6));
    }
  }
  return out;
}

void CheckBuiltSquare(AttentionBuilder& builder) {
  ASSERT_TRUE(builder.ValidateAttentionType("square"));
  ASSERT_TRUE(builder.Set("quadratic_temp", 2).ok());
  EXPECT_TRUE(builder.Get("quadratic_temp")->is_float());  // Coerced to Float.
  absl::StatusOr<AttentionPtr> attention = builder.Build("square");
  ASSERT_TRUE(attention.ok()) << attention.status();
  EXPECT_EQ((*attention)->class_name(), "QuadraticAttention");
  EXPECT_DOUBLE_EQ((*attention)->attribute("quadratic_temp")->as_float(), 2.0);
  Qkv x = RandomQkv(2, 4, 5, 2, 3, 3);
  torch::Tensor out = (*attention)
                          ->forward(x.queries, x.keys, x.values, Mask::Full(4, 5),
                                    FullLengths(2, 4), Lengths({5, 2}, 5));
  EXPECT_TENSOR_CLOSE(out, ReferenceSquare(x, 2.0, {5, 2}), 1e-5, 1e-5);
  EXPECT_EQ(builder.Set("quadratic_temp", "hot").message(),
            "Invalid value 'hot' for parameter 'quadratic_temp'");
}

TEST(QuadraticAttentionTest, OnAFreshRegistry) {
  AttentionRegistry registry;
  ASSERT_TRUE(RegisterQuadraticAttention(registry).ok());
  EXPECT_EQ(RegisterQuadraticAttention(registry).message(), "square is already registered");
  AttentionBuilder builder(registry);
  EXPECT_EQ(builder.available_attentions(), std::vector<std::string>{"square"});
  CheckBuiltSquare(builder);
  // Default: quadratic_temp None -> 1.0.
  AttentionBuilder defaults(registry);
  absl::StatusOr<AttentionPtr> attention = defaults.Build("square");
  ASSERT_TRUE(attention.ok());
  EXPECT_DOUBLE_EQ((*attention)->attribute("quadratic_temp")->as_float(), 1.0);
}

TEST(QuadraticAttentionTest, OnTheGlobalRegistry) {
  AttentionRegistry& global = GlobalAttentionRegistry();
  if (!global.Contains("square")) {
    ASSERT_TRUE(RegisterQuadraticAttention(global).ok());
  }
  EXPECT_EQ(global.keys().back(), "square");
  AttentionBuilder builder;  // Over the global registry.
  CheckBuiltSquare(builder);
  // Built-ins still build beside it, and it composes like any other type.
  EXPECT_TRUE(builder.Build("full").ok());
  ASSERT_TRUE(builder.Set("length_limit", 2).ok());
  absl::StatusOr<AttentionPtr> composed = builder.Build("conditional-full:square");
  ASSERT_TRUE(composed.ok()) << composed.status();
  EXPECT_EQ((*composed)->attribute("other_attention.__class__")->as_string(), "QuadraticAttention");
}

TEST(QuadraticAttentionTest, DeclaresBothParameters) {
  AttentionRegistry registry;
  ASSERT_TRUE(RegisterQuadraticAttention(registry).ok());
  AttentionBuilder builder(registry);
  ASSERT_TRUE(builder.Set("eps", 0.5).ok());
  absl::StatusOr<AttentionPtr> attention = builder.Build("square");
  ASSERT_TRUE(attention.ok()) << attention.status();
  EXPECT_DOUBLE_EQ((*attention)->attribute("eps")->as_float(), 0.5);
  EXPECT_DOUBLE_EQ((*attention)->attribute("quadratic_temp")->as_float(), 1.0);
  AttentionBuilder defaults(registry);
  EXPECT_DOUBLE_EQ((*defaults.Build("square"))->attribute("eps")->as_float(), 1e-6);
}

TEST(QuadraticAttentionTest, RecurrentTwinMatchesTheCausalBatchForm) {
  torch::NoGradGuard no_grad;
  constexpr int64_t kL = 6;
  const Qkv x = RandomQkv(2, kL, kL, 2, 3, 4, 5);
  QuadraticAttentionImpl batch(0.7);
  const torch::Tensor expected =
      batch.forward(x.queries, x.keys, x.values, Mask::TriangularCausal(kL), FullLengths(2, kL),
                    FullLengths(2, kL));
  // One step at a time.
  RecurrentQuadraticAttentionImpl recurrent(0.7);
  AttentionState state;
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < kL; ++i) {
    steps.push_back(recurrent.forward(x.queries.select(1, i), x.keys.select(1, i),
                                      x.values.select(1, i), state));
  }
  EXPECT_TENSOR_CLOSE(torch::stack(steps, 1), expected, 1e-5, 1e-5);
  // The slot form: a chunk of 4 then two steps.
  StatePool pool({recurrent.SlotStateSpec({2, 3, 4, 8})}, 2, torch::TensorOptions());
  std::vector<torch::Tensor> chunks;
  for (auto [from, to] : {std::pair<int64_t, int64_t>{0, 4}, {4, 5}, {5, 6}}) {
    std::vector<SlotRows> rows = pool.Rows(0, 2, to);
    chunks.push_back(recurrent.ForwardSlots(x.queries.narrow(1, from, to - from),
                                            x.keys.narrow(1, from, to - from),
                                            x.values.narrow(1, from, to - from), rows.front()));
    rows.front().positions.add_(to - from);
  }
  EXPECT_TENSOR_CLOSE(torch::cat(chunks, 1), expected, 1e-5, 1e-5);
}

}  // namespace
}  // namespace performer::testing
