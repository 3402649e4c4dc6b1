#include "core/builders/attention_builder.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/attention/attention_registries.h"
#include "core/feature_maps/feature_map_catalogue.h"

namespace performer {
namespace {

TEST(BuiltinAttentionsTest, RegisteredInReferenceOrder) {
  const std::vector<std::string> reference = {"full",
                                              "linear",
                                              "causal-linear",
                                              "clustered",
                                              "improved-clustered",
                                              "reformer",
                                              "conditional-full",
                                              "exact-topk",
                                              "causal-improved-clustered",
                                              "local",
                                              "aft-full",
                                              "aft-simple"};
  // A fresh registry: the global one may hold user types registered by other
  // tests (quadratic_attention_test.cc).
  AttentionRegistry registry;
  RecurrentAttentionRegistry recurrent;
  RecurrentCrossAttentionRegistry cross;
  ASSERT_TRUE(RegisterBuiltinAttentions(registry, recurrent, cross).ok());
  const std::vector<std::string>& keys = registry.keys();
  // Every registered name is a reference name, in the reference's order.
  std::vector<std::string> expected;
  for (const std::string& name : reference) {
    if (std::find(keys.begin(), keys.end(), name) != keys.end()) expected.push_back(name);
  }
  EXPECT_EQ(keys, expected);
  for (const char* name : {"full", "linear", "causal-linear", "conditional-full", "exact-topk",
                           "local", "aft-full", "aft-simple"}) {
    EXPECT_TRUE(registry.Contains(name)) << name;
    EXPECT_TRUE(GlobalAttentionRegistry().Contains(name)) << name;
  }
}

TEST(BuiltinAttentionsTest, GlobalParameterTable) {
  const AttentionRegistry& registry = GlobalAttentionRegistry();
  const std::vector<std::pair<std::string, std::string>> table = {
      {"softmax_temp", "Optional[Float, None]"},
      {"attention_dropout", "Optional[Float, 0.1]"},
      {"event_dispatcher", "Optional[EventDispatcherInstance, '']"},
      {"query_dimensions", "Int"},
      {"feature_map", "Optional[Callable, None]"},
      {"topk", "Optional[Int, 32]"},
      {"length_limit", "Optional[Int, 512]"},
      {"local_context", "Int"},
      {"max_sequence_length", "Optional[Int, 1024]"},
      {"aft_parameterization", "Optional[Int, 64]"}};
  for (const auto& [name, spec] : table) {
    ASSERT_TRUE(registry.ContainsParameter(name)) << name;
    EXPECT_EQ(registry.Spec(name)->Describe(), spec) << name;
  }
  EXPECT_FALSE(registry.ContainsParameter("eps"));
}

TEST(BuiltinAttentionsTest, RegisteringTwiceFails) {
  AttentionRegistry attention;
  RecurrentAttentionRegistry recurrent;
  RecurrentCrossAttentionRegistry cross;
  ASSERT_TRUE(RegisterBuiltinAttentions(attention, recurrent, cross).ok());
  absl::Status again = RegisterBuiltinAttentions(attention, recurrent, cross);
  EXPECT_EQ(again.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(again.message(), "full is already registered");
}

TEST(AttentionBuilderTest, SetStoresCoercedValues) {
  AttentionBuilder builder;
  ASSERT_TRUE(builder.Set("topk", 3.7).ok());
  ASSERT_TRUE(builder.Set("softmax_temp", 1).ok());
  ASSERT_TRUE(builder.Set("local_context", "5").ok());
  ASSERT_TRUE(builder.Set("attention_dropout", 0).ok());
  EXPECT_EQ(builder.Get("topk")->as_int(), 3);
  EXPECT_TRUE(builder.Get("softmax_temp")->is_float());
  EXPECT_DOUBLE_EQ(builder.Get("softmax_temp")->as_float(), 1.0);
  EXPECT_EQ(builder.Get("local_context")->as_int(), 5);
  EXPECT_DOUBLE_EQ(builder.Get("attention_dropout")->as_float(), 0.0);
  ASSERT_TRUE(builder.Set("topk", ParamValue()).ok());
  EXPECT_EQ(builder.Get("topk")->as_int(), 32);  // None -> registry default.
}

TEST(AttentionBuilderTest, SetErrors) {
  AttentionBuilder builder;
  absl::Status unknown = builder.Set("dropout", 0.1);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "'dropout' is not a valid attention parameter name");
  absl::Status invalid = builder.Set("attention_dropout", "abc");
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid.message(), "Invalid value 'abc' for parameter 'attention_dropout'");
  absl::Status none_required = builder.Set("query_dimensions", ParamValue());
  EXPECT_EQ(none_required.message(), "Invalid value None for parameter 'query_dimensions'");
  EXPECT_EQ(builder.Get("softmax_temp").status().code(), absl::StatusCode::kNotFound);
  // A failed Set stores nothing.
  EXPECT_EQ(builder.Get("attention_dropout").status().code(), absl::StatusCode::kNotFound);
}

TEST(AttentionBuilderTest, ValidateAttentionType) {
  AttentionBuilder builder;
  EXPECT_TRUE(builder.ValidateAttentionType("full"));
  EXPECT_TRUE(builder.ValidateAttentionType("conditional-full:linear"));
  EXPECT_TRUE(builder.ValidateAttentionType("full,linear"));
  EXPECT_FALSE(builder.ValidateAttentionType("whatever"));
  EXPECT_FALSE(builder.ValidateAttentionType("conditional-full:nope"));
  EXPECT_FALSE(builder.ValidateAttentionType(""));
  EXPECT_EQ(builder.available_attentions(), GlobalAttentionRegistry().keys());
}

TEST(AttentionBuilderTest, BuildErrors) {
  AttentionBuilder builder;
  ASSERT_TRUE(builder.Set("query_dimensions", 8).ok());
  absl::StatusOr<AttentionPtr> two = builder.Build("full,linear");
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(two.status().message(), "Invalid attention_type argument 'full,linear'");
  absl::StatusOr<AttentionPtr> unknown = builder.Build("nope");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(unknown.status().message(), "Unknown attention type 'nope'");
  absl::StatusOr<AttentionPtr> local = builder.Build("local");
  EXPECT_EQ(local.status().message(), "Invalid value None for parameter 'local_context'");
  absl::StatusOr<AttentionPtr> not_decorator = builder.Build("full:linear");
  EXPECT_EQ(not_decorator.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(not_decorator.status().message(),
            "FullAttention.__init__() got multiple values for argument 'softmax_temp'");
  absl::StatusOr<AttentionPtr> alone = builder.Build("conditional-full");
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kFailedPrecondition);

  AttentionBuilder fresh;
  absl::StatusOr<AttentionPtr> linear = fresh.Build("linear");
  EXPECT_EQ(linear.status().message(), "Invalid value None for parameter 'query_dimensions'");
  ASSERT_TRUE(fresh.Set("attention_dropout", 1.5).ok());
  absl::StatusOr<AttentionPtr> dropout = fresh.Build("full");
  EXPECT_EQ(dropout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dropout.status().message(),
            "dropout probability has to be between 0 and 1, but got 1.5");
}

TEST(AttentionBuilderTest, BuildUsesParametersAndDefaults) {
  AttentionBuilder builder;
  absl::StatusOr<AttentionPtr> topk = builder.Build("exact-topk");
  ASSERT_TRUE(topk.ok()) << topk.status();
  EXPECT_EQ((*topk)->class_name(), "ExactTopKAttention");
  EXPECT_EQ((*topk)->attribute("topk")->as_int(), 32);
  EXPECT_TRUE((*topk)->attribute("softmax_temp")->is_none());
  EXPECT_DOUBLE_EQ((*topk)->attribute("dropout.p")->as_float(), 0.1);

  absl::StatusOr<AttentionPtr> aft = builder.Build("aft-full");
  ASSERT_TRUE(aft.ok()) << aft.status();
  auto named = (*aft)->named_parameters();
  EXPECT_EQ(named["u"].sizes(), (std::vector<int64_t>{1024, 64}));

  ASSERT_TRUE(builder.Set("topk", 5).ok());
  ASSERT_TRUE(builder.Set("softmax_temp", 0.25).ok());
  ASSERT_TRUE(builder.Set("event_dispatcher", "mine").ok());
  ASSERT_TRUE(builder.Set("local_context", 7).ok());
  topk = builder.Build("exact-topk");
  ASSERT_TRUE(topk.ok());
  EXPECT_EQ((*topk)->attribute("topk")->as_int(), 5);
  EXPECT_DOUBLE_EQ((*topk)->attribute("softmax_temp")->as_float(), 0.25);
  EXPECT_EQ((*topk)->attribute("event_dispatcher")->as_string(), "mine");
  absl::StatusOr<AttentionPtr> local = builder.Build("local");
  ASSERT_TRUE(local.ok());
  EXPECT_EQ((*local)->attribute("local_context")->as_int(), 7);

  // Every Build() makes a fresh module with its own parameters.
  absl::StatusOr<AttentionPtr> aft2 = builder.Build("aft-full");
  ASSERT_TRUE(aft2.ok());
  EXPECT_NE(aft->get(), aft2->get());
  EXPECT_FALSE(torch::equal(named["u"], (*aft2)->named_parameters()["u"]));
}

TEST(AttentionBuilderTest, FromDictionaryStrictness) {
  absl::StatusOr<AttentionBuilder> strict =
      AttentionBuilder::FromDictionary({{"topk", 3}, {"dropout", 0.1}});
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(strict.status().message(), "The builder has no parameter 'dropout'");

  absl::StatusOr<AttentionBuilder> lenient =
      AttentionBuilder::FromDictionary({{"topk", 3}, {"dropout", 0.1}}, /*strict=*/false);
  ASSERT_TRUE(lenient.ok()) << lenient.status();
  EXPECT_EQ(lenient->Get("topk")->as_int(), 3);
  EXPECT_EQ(lenient->parameters().size(), 1u);

  absl::StatusOr<AttentionBuilder> invalid =
      AttentionBuilder::FromDictionary({{"attention_dropout", "abc"}}, /*strict=*/false);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid.status().message(), "Invalid value 'abc' for parameter 'attention_dropout'");
}

TEST(AttentionBuilderTest, FromJsonWithFeatureMapFactory) {
  nlohmann::json params = {{"query_dimensions", 6},
                           {"feature_map", {{"factory", "elu_feature_map"}, {"kwargs", {}}}},
                           {"softmax_temp", nullptr}};
  absl::StatusOr<AttentionBuilder> builder = AttentionBuilder::FromJson(params);
  ASSERT_TRUE(builder.ok()) << builder.status();
  EXPECT_TRUE(builder->Get("feature_map")->is_factory());
  EXPECT_TRUE(builder->Get("softmax_temp")->is_none());
  absl::StatusOr<AttentionPtr> linear = builder->Build("linear");
  ASSERT_TRUE(linear.ok()) << linear.status();
  EXPECT_EQ((*linear)->attribute("feature_map.__class__")->as_string(),
            "ActivationFunctionFeatureMap");

  absl::StatusOr<AttentionBuilder> array =
      AttentionBuilder::FromJson(nlohmann::json{{"topk", {1, 2}}});
  EXPECT_EQ(array.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(array.status().message(), "Invalid value [1,2] for parameter 'topk'");
  EXPECT_FALSE(AttentionBuilder::FromJson(nlohmann::json::array()).ok());
  absl::StatusOr<AttentionBuilder> unknown =
      AttentionBuilder::FromJson(nlohmann::json{{"nope", {1, 2}}}, /*strict=*/false);
  EXPECT_TRUE(unknown.ok()) << unknown.status();
  absl::StatusOr<AttentionBuilder> bad_factory = AttentionBuilder::FromJson(
      nlohmann::json{{"feature_map", {{"factory", "NoSuchMap"}, {"kwargs", {}}}}});
  EXPECT_EQ(bad_factory.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(AttentionBuilderTest, RecurrentBuilders) {
  RecurrentAttentionBuilder recurrent;
  EXPECT_EQ(recurrent.available_attentions(),
            (std::vector<std::string>{"full", "linear", "causal-linear"}));
  EXPECT_FALSE(recurrent.ValidateAttentionType("local"));
  EXPECT_EQ(recurrent.Set("clusters", 3).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(recurrent.Set("query_dimensions", 4).ok());
  absl::StatusOr<RecurrentAttentionPtr> causal = recurrent.Build("causal-linear");
  ASSERT_TRUE(causal.ok()) << causal.status();
  EXPECT_EQ((*causal)->class_name(), "RecurrentLinearAttention");

  RecurrentCrossAttentionBuilder cross;
  EXPECT_EQ(cross.available_attentions(), (std::vector<std::string>{"full", "linear"}));
  absl::StatusOr<RecurrentCrossAttentionPtr> full = cross.Build("full");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ((*full)->class_name(), "RecurrentCrossFullAttention");
}

TEST(AttentionBuilderTest, UsesItsOwnRegistry) {
  AttentionRegistry registry;
  AttentionBuilder builder(registry);
  EXPECT_TRUE(builder.available_attentions().empty());
  EXPECT_EQ(builder.Set("topk", 3).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(builder.Build("full").status().message(), "Unknown attention type 'full'");
}

}  // namespace
}  // namespace performer
