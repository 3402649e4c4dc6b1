// A user-defined attention, as in the reference's "creating a custom
// attention layer" document: "square" attention with scores (q.k)^2 * temp,
// multiplicatively masked and normalised by their sum over the keys. It is
// registered with its own parameter, built through AttentionBuilder, and
// checked against a direct computation; on a fresh registry and on the
// global one.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/attention/attention_registries.h"
#include "core/builders/attention_builder.h"
#include "core/registry/param_spec.h"
#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

class QuadraticAttentionImpl : public AttentionImpl {
 public:
  explicit QuadraticAttentionImpl(double quadratic_temp = 1.0, double eps = 1e-6)
      : quadratic_temp_(quadratic_temp), eps_(eps) {}

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& /*query_lengths*/, const Mask& key_lengths) override {
    torch::Tensor scores = torch::einsum("nlhe,nshe->nhls", {queries, keys}).square();
    scores = scores * quadratic_temp_;
    scores = scores * attn_mask.float_matrix();
    scores = scores * key_lengths.float_matrix().unsqueeze(1).unsqueeze(1);
    torch::Tensor attention = scores / (scores.sum(-1, /*keepdim=*/true) + eps_);
    return torch::einsum("nhls,nshd->nlhd", {attention, values}).contiguous();
  }

  std::string class_name() const override { return "QuadraticAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override {
    if (name == "quadratic_temp") return ParamValue(quadratic_temp_);
    if (name == "eps") return ParamValue(eps_);
    return std::nullopt;
  }

 private:
  double quadratic_temp_;
  double eps_;
};

absl::Status RegisterQuadraticAttention(AttentionRegistry& registry) {
  return registry.Register(
      "square", "QuadraticAttention", {{"quadratic_temp", OptionalSpec(FloatSpec(), 1.0)}},
      [](const std::vector<AttentionPtr>& /*positional*/,
         const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
        return std::make_shared<QuadraticAttentionImpl>(params.at("quadratic_temp").as_float());
      });
}

// Direct computation for one (n, h): w[l,s] = t (q_l.k_s)^2 [s < len],
// out_l = sum_s w[l,s] v_s / (sum_s w[l,s] + eps).
torch::Tensor ReferenceSquare(const Qkv& x, double t, const std::vector<int64_t>& key_lengths) {
  torch::Tensor out =
      torch::zeros({x.queries.size(0), x.queries.size(1), x.queries.size(2), x.values.size(3)});
  for (int64_t n = 0; n < x.queries.size(0); ++n) {
    for (int64_t h = 0; h < x.queries.size(2); ++h) {
      torch::Tensor q = x.queries.select(0, n).select(1, h);
      torch::Tensor k = x.keys.select(0, n).select(1, h);
      torch::Tensor v = x.values.select(0, n).select(1, h);
      torch::Tensor w = q.matmul(k.t()).pow(2) * t;
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

}  // namespace
}  // namespace performer::testing
