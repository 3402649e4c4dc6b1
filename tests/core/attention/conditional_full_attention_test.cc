#include "core/attention/conditional_full_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/attention/aft_full_attention.h"
#include "core/attention/full_attention.h"
#include "core/attention/linear_attention.h"
#include "core/builders/attention_builder.h"
#include "core/io/state_dict.h"
#include "tests/core/attention/attention_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

struct Outputs {
  torch::Tensor conditional, full, linear;
};

Outputs RunAll(int64_t length, int64_t limit) {
  Qkv x = RandomQkv(2, length, length, 2, 4, 3, static_cast<uint64_t>(length));
  auto linear = std::make_shared<LinearAttentionImpl>(4);
  ConditionalFullAttentionImpl conditional(linear, limit, 0.4, 0.0);
  FullAttentionImpl full(0.4, 0.0);
  const Mask mask = Mask::Full(length, length);
  const Mask lengths = FullLengths(2, length);
  const Mask key_lengths = Lengths({length, length - 1}, length);
  return {conditional.forward(x.queries, x.keys, x.values, mask, lengths, key_lengths),
          full.forward(x.queries, x.keys, x.values, mask, lengths, key_lengths),
          linear->forward(x.queries, x.keys, x.values, mask, lengths, key_lengths)};
}

TEST(ConditionalFullAttentionTest, SwitchesOnTheLengthLimit) {
  Outputs below = RunAll(5, 6);
  EXPECT_TRUE(torch::equal(below.conditional, below.full));
  Outputs at = RunAll(6, 6);  // Not above the limit: full attention.
  EXPECT_TRUE(torch::equal(at.conditional, at.full));
  Outputs above = RunAll(7, 6);
  EXPECT_TRUE(torch::equal(above.conditional, above.linear));
  EXPECT_FALSE(torch::allclose(above.conditional, above.full));
}

TEST(ConditionalFullAttentionTest, EitherSideAboveTheLimitDelegates) {
  Qkv x = RandomQkv(1, 3, 8, 1, 4, 2);
  auto linear = std::make_shared<LinearAttentionImpl>(4);
  ConditionalFullAttentionImpl conditional(linear, 4, std::nullopt, 0.0);
  const Mask mask = Mask::Full(3, 8);
  torch::Tensor a =
      conditional.forward(x.queries, x.keys, x.values, mask, FullLengths(1, 3), FullLengths(1, 8));
  torch::Tensor b =
      linear->forward(x.queries, x.keys, x.values, mask, FullLengths(1, 3), FullLengths(1, 8));
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(ConditionalFullAttentionTest, SubmodulesAndStateDict) {
  auto aft = std::make_shared<AFTFullAttentionImpl>(8, 2);
  ConditionalFullAttentionImpl conditional(aft, 16);
  auto children = conditional.named_children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children.keys()[0], "full_attention");
  EXPECT_EQ(children.keys()[1], "other_attention");
  std::map<std::string, torch::Tensor> state = io::StateDict(conditional);
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state.at("other_attention.u").sizes(), (std::vector<int64_t>{8, 2}));
  EXPECT_EQ(state.count("other_attention.v"), 1u);
}

TEST(ConditionalFullAttentionTest, BuiltByCompositionWithIntrospection) {
  AttentionBuilder builder;
  ASSERT_TRUE(builder.Set("query_dimensions", 8).ok());
  ASSERT_TRUE(builder.Set("length_limit", 4).ok());
  absl::StatusOr<AttentionPtr> built = builder.Build("conditional-full:linear");
  ASSERT_TRUE(built.ok()) << built.status();
  EXPECT_EQ((*built)->class_name(), "ConditionalFullAttention");
  EXPECT_EQ((*built)->attribute("length_limit")->as_int(), 4);
  EXPECT_EQ((*built)->attribute("full_attention.__class__")->as_string(), "FullAttention");
  EXPECT_TRUE((*built)->attribute("full_attention.softmax_temp")->is_none());
  EXPECT_DOUBLE_EQ((*built)->attribute("full_attention.dropout.p")->as_float(), 0.1);
  EXPECT_EQ((*built)->attribute("other_attention.__class__")->as_string(), "LinearAttention");
  EXPECT_DOUBLE_EQ((*built)->attribute("other_attention.eps")->as_float(), 1e-6);
}

TEST(ConditionalFullAttentionTest, DecoratorAloneOrWithTwoModulesIsATypeError) {
  AttentionBuilder builder;
  ASSERT_TRUE(builder.Set("query_dimensions", 8).ok());
  absl::StatusOr<AttentionPtr> alone = builder.Build("conditional-full");
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(alone.status().message(),
            "ConditionalFullAttention.__init__() missing 1 required positional argument: "
            "'other_attention'");
  absl::StatusOr<AttentionPtr> two = builder.Build("conditional-full:linear,full");
  EXPECT_EQ(two.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(two.status().message(),
            "ConditionalFullAttention.__init__() got multiple values for argument "
            "'length_limit'");
}

TEST(ConditionalFullAttentionTest, GradientsFlowThroughEitherBranch) {
  auto linear = std::make_shared<LinearAttentionImpl>(3);
  ConditionalFullAttentionImpl conditional(linear, 4, std::nullopt, 0.0);
  Qkv short_x = RandomQkv(1, 4, 4, 1, 3, 2);
  ExpectGradientsFlow(conditional, short_x, Mask::Full(4, 4), FullLengths(1, 4), FullLengths(1, 4));
  Qkv long_x = RandomQkv(1, 6, 6, 1, 3, 2);
  ExpectGradientsFlow(conditional, long_x, Mask::Full(6, 6), FullLengths(1, 6), FullLengths(1, 6));
}

}  // namespace
}  // namespace performer::testing
