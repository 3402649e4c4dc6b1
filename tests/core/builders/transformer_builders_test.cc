#include "core/builders/transformer_builders.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "core/feature_maps/feature_map_catalogue.h"
#include "core/introspection_path.h"
#include "core/transformers/make_mirror.h"

namespace performer {
namespace {

using KeyShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The state-dict keys in PyTorch's order: per module its own parameters,
// then its own buffers, then the children in registration order.
void CollectKeys(const torch::nn::Module& module, const std::string& prefix, KeyShapes* out) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    out->emplace_back(prefix + p.key(), p.value().sizes().vec());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    out->emplace_back(prefix + b.key(), b.value().sizes().vec());
  }
  for (const auto& c : module.named_children())
    CollectKeys(*c.value(), prefix + c.key() + ".", out);
}

KeyShapes StateDictKeys(const torch::nn::Module& module) {
  KeyShapes out;
  CollectKeys(module, "", &out);
  return out;
}

[[maybe_unused]] std::vector<std::string> Names(const KeyShapes& keys) {
  std::vector<std::string> names;
  for (const auto& k : keys) names.push_back(k.first);
  return names;
}

void ExpectValue(const TransformerBuilderBase& builder, const std::string& name,
                 const ParamValue& expected) {
  absl::StatusOr<ParamValue> v = builder.Get(name);
  ASSERT_TRUE(v.ok()) << name << ": " << v.status();
  EXPECT_EQ(*v, expected) << name << " = " << v->Repr() << ", expected " << expected.Repr();
}

TEST(TransformerBuildersTest, EncoderDefaults) {
  TransformerEncoderBuilder b;
  ExpectValue(b, "n_layers", int64_t{4});
  ExpectValue(b, "n_heads", int64_t{4});
  ExpectValue(b, "query_dimensions", int64_t{64});
  ExpectValue(b, "value_dimensions", int64_t{64});
  ExpectValue(b, "feed_forward_dimensions", int64_t{1024});
  ExpectValue(b, "model_dimensions", int64_t{256});
  ExpectValue(b, "dropout", 0.1);
  ExpectValue(b, "activation", "relu");
  ExpectValue(b, "final_normalization", true);
  ExpectValue(b, "event_dispatcher", "");
  ExpectValue(b, "attention_type", "full");
  EXPECT_EQ(b.class_name(), "TransformerEncoderBuilder");
  EXPECT_EQ(RecurrentEncoderBuilder().class_name(), "RecurrentEncoderBuilder");
}

TEST(TransformerBuildersTest, DecoderDerivedDimensionsFollowTheirSources) {
  TransformerDecoderBuilder b;
  ExpectValue(b, "cross_n_heads", int64_t{4});
  ExpectValue(b, "cross_model_dimensions", int64_t{256});
  ExpectValue(b, "self_attention_type", "full");
  ExpectValue(b, "cross_attention_type", "full");
  ASSERT_TRUE(b.Set("n_heads", 4).ok());
  ASSERT_TRUE(b.Set("query_dimensions", 8).ok());
  ASSERT_TRUE(b.Set("value_dimensions", 8).ok());
  ASSERT_TRUE(b.Set("cross_n_heads", 2).ok());
  ASSERT_TRUE(b.Set("cross_value_dimensions", 12).ok());
  ExpectValue(b, "model_dimensions", int64_t{32});
  ExpectValue(b, "cross_query_dimensions", int64_t{8});
  ExpectValue(b, "cross_model_dimensions", int64_t{24});
  // None restores the derived default.
  ASSERT_TRUE(b.Set("cross_n_heads", ParamValue()).ok());
  ExpectValue(b, "cross_model_dimensions", int64_t{48});
  ASSERT_TRUE(b.Set("model_dimensions", 20).ok());
  ExpectValue(b, "model_dimensions", int64_t{20});
  ASSERT_TRUE(b.Set("model_dimensions", ParamValue()).ok());
  ExpectValue(b, "model_dimensions", int64_t{32});
  // Python's `value or default`: 0 also means "derive it".
  ASSERT_TRUE(b.Set("model_dimensions", 0).ok());
  ExpectValue(b, "model_dimensions", int64_t{32});
  ASSERT_TRUE(b.Set("cross_value_dimensions", 0).ok());
  ExpectValue(b, "cross_value_dimensions", int64_t{8});
}

TEST(TransformerBuildersTest, PropertiesAlsoTryTheAttentionBuilder) {
  TransformerEncoderBuilder b;
  ASSERT_TRUE(b.Set("query_dimensions", 16).ok());
  ExpectValue(b, "attention.query_dimensions", int64_t{16});
  // Not an attention parameter: the silent attempt fails, the property is set.
  ASSERT_TRUE(b.Set("dropout", 0.3).ok());
  ExpectValue(b, "dropout", 0.3);
  EXPECT_EQ(b.attention().Get("dropout").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(b.Set("event_dispatcher", "d").ok());
  ExpectValue(b, "attention.event_dispatcher", "d");
  // Never set on the attention builder.
  EXPECT_EQ(b.Get("attention.softmax_temp").status().code(), absl::StatusCode::kNotFound);
}

TEST(TransformerBuildersTest, AttentionParametersAreSharedBySelfAndCross) {
  TransformerDecoderBuilder b;
  ASSERT_TRUE(b.Set("softmax_temp", 1).ok());
  ExpectValue(b, "self_attention.softmax_temp", 1.0);
  ExpectValue(b, "cross_attention.softmax_temp", 1.0);
  ASSERT_TRUE(b.Set("topk", 3.7).ok());
  EXPECT_EQ(*b.cross_attention().Get("topk"), ParamValue(int64_t{3}));
  // Unknown names and invalid values are the attention builder's errors.
  absl::Status unknown = b.Set("foobar", 1);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.message(), "'foobar' is not a valid attention parameter name");
  absl::Status invalid = b.Set("attention_dropout", "abc");
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(invalid.message(), "Invalid value 'abc' for parameter 'attention_dropout'");
  // Recurrent registries have no clustered parameters.
  EXPECT_EQ(RecurrentDecoderBuilder().Set("clusters", 3).code(), absl::StatusCode::kNotFound);
}

TEST(TransformerBuildersTest, AttentionBuilderPropertiesAreReadOnly) {
  TransformerEncoderBuilder e;
  EXPECT_EQ(e.Set("attention", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(e.Get("attention").ok());
  TransformerDecoderBuilder d;
  EXPECT_EQ(d.Set("self_attention", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.Set("cross_attention", 1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(d.Get("attention_type").status().code(), absl::StatusCode::kNotFound);
}

TEST(TransformerBuildersTest, ValidationMessages) {
  TransformerEncoderBuilder b;
  absl::Status s = b.Set("activation", "tanh");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "'tanh' is not one of the availabel activation types ['relu', 'gelu']");
  ExpectValue(b, "activation", "relu");
  ASSERT_TRUE(b.Set("activation", "gelu").ok());

  s = b.Set("attention_type", "whatever");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "'whatever' is not an available attention type");
  // Each name exists: valid on set (it fails in Build()).
  EXPECT_TRUE(b.Set("attention_type", "full,linear").ok());
  EXPECT_TRUE(b.Set("attention_type", "conditional-full:linear").ok());

  RecurrentEncoderBuilder r;
  EXPECT_EQ(r.Set("attention_type", "local").message(),
            "'local' is not an available attention type");
  EXPECT_TRUE(r.Set("attention_type", "causal-linear").ok());
  TransformerDecoderBuilder d;
  EXPECT_EQ(d.Set("cross_attention_type", "nope").message(),
            "'nope' is not an available cross attention type");
  EXPECT_EQ(d.Set("self_attention_type", "nope").message(),
            "'nope' is not an available self attention type");
  // Python calls value.split(): a non-string is an AttributeError, so
  // from_dictionary reports an unknown parameter.
  s = b.Set("attention_type", 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "'int' object has no attribute 'split'");
  EXPECT_EQ(TransformerEncoderBuilder::FromDictionary({{"attention_type", ParamValue()}})
                .status()
                .message(),
            "The builder has no parameter 'attention_type'");
  RecurrentDecoderBuilder rd;
  // The recurrent cross registry has no causal-linear.
  EXPECT_FALSE(rd.Set("cross_attention_type", "causal-linear").ok());
  EXPECT_TRUE(rd.Set("self_attention_type", "causal-linear").ok());

  s = b.Set("n_layers", "abc");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Invalid value 'abc' for parameter 'n_layers'");
  ASSERT_TRUE(b.Set("n_layers", "3").ok());
  ExpectValue(b, "n_layers", int64_t{3});
}

TEST(TransformerBuildersTest, FinalNormalizationIsPythonBool) {
  TransformerEncoderBuilder b;
  ASSERT_TRUE(b.Set("final_normalization", 0).ok());
  ExpectValue(b, "final_normalization", false);
  ASSERT_TRUE(b.Set("final_normalization", "False").ok());
  ExpectValue(b, "final_normalization", true);
  ASSERT_TRUE(b.Set("final_normalization", ParamValue()).ok());
  ExpectValue(b, "final_normalization", false);
}

TEST(TransformerBuildersTest, PrivateAttributesAreStoredOnly) {
  TransformerEncoderBuilder b;
  ASSERT_TRUE(b.Set("_note", "x").ok());
  ExpectValue(b, "_note", "x");
  EXPECT_EQ(b.Get("_other").status().code(), absl::StatusCode::kNotFound);
}

TEST(TransformerBuildersTest, FromDictionaryStrictness) {
  absl::StatusOr<TransformerEncoderBuilder> b =
      TransformerEncoderBuilder::FromDictionary({{"n_layers", 2}, {"foobar", 1}});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.status().message(), "The builder has no parameter 'foobar'");

  b = TransformerEncoderBuilder::FromDictionary({{"n_layers", 2}, {"foobar", 1}}, false);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->n_layers(), 2);

  // Invalid values fail even when not strict.
  b = TransformerEncoderBuilder::FromDictionary({{"attention_dropout", "abc"}}, false);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "Invalid value 'abc' for parameter 'attention_dropout'");

  // Read-only properties are unknown parameters too.
  b = TransformerEncoderBuilder::FromDictionary({{"attention", 1}});
  EXPECT_EQ(b.status().message(), "The builder has no parameter 'attention'");
}

TEST(TransformerBuildersTest, FromJsonPopsStrictAndKeepsOrder) {
  absl::StatusOr<TransformerDecoderBuilder> b = TransformerDecoderBuilder::FromJson(
      nlohmann::json{{"foobar", 1}, {"strict", false}, {"n_heads", 2}});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->n_heads(), 2);
  b = TransformerDecoderBuilder::FromJson(nlohmann::json{{"foobar", 1}});
  EXPECT_EQ(b.status().message(), "The builder has no parameter 'foobar'");
  b = TransformerDecoderBuilder::FromJson(nlohmann::json{{"foobar", 1}}, /*strict=*/false);
  EXPECT_TRUE(b.ok());

  // The first failing item in the object's order is reported.
  nlohmann::ordered_json ordered;
  ordered["zzz"] = 1;
  ordered["activation"] = "tanh";
  b = TransformerDecoderBuilder::FromJson(ordered);
  EXPECT_EQ(b.status().message(), "The builder has no parameter 'zzz'");

  // Feature maps are given as {factory, kwargs}.
  absl::StatusOr<TransformerEncoderBuilder> e = TransformerEncoderBuilder::FromJson(
      nlohmann::json{{"attention_type", "linear"},
                     {"query_dimensions", 4},
                     {"feature_map", {{"factory", "Favor"}, {"kwargs", {{"n_dims", 8}}}}}});
  ASSERT_TRUE(e.ok()) << e.status();
  absl::StatusOr<ParamValue> fm = e->Get("attention.feature_map");
  ASSERT_TRUE(fm.ok()) << fm.status();
  EXPECT_TRUE(fm->is_factory());
}

TEST(TransformerBuildersTest, DecoderExampleHas28TensorsInOrder) {
  // The reference's example: from_kwargs(n_layers=1, n_heads=2,
  // query_dimensions=4, value_dimensions=4, feed_forward_dimensions=8).
  absl::StatusOr<TransformerDecoderBuilder> b =
      TransformerDecoderBuilder::FromDictionary({{"n_layers", 1},
                                                 {"n_heads", 2},
                                                 {"query_dimensions", 4},
                                                 {"value_dimensions", 4},
                                                 {"feed_forward_dimensions", 8}});
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<TransformerDecoderPtr> model = b->Build();
  ASSERT_TRUE(model.ok()) << model.status();
  KeyShapes expected;
  for (const char* attention : {"self_attention", "cross_attention"}) {
    for (const char* projection : {"query", "key", "value", "out"}) {
      const std::string prefix =
          std::string("layers.0.") + attention + "." + projection + "_projection.";
      expected.emplace_back(prefix + "weight", std::vector<int64_t>{8, 8});
      expected.emplace_back(prefix + "bias", std::vector<int64_t>{8});
    }
  }
  for (const char* linear : {"linear1", "linear2"}) {
    expected.emplace_back(std::string("layers.0.") + linear + ".weight",
                          std::vector<int64_t>{8, 8});
    expected.emplace_back(std::string("layers.0.") + linear + ".bias", std::vector<int64_t>{8});
  }
  for (const char* norm : {"layers.0.norm1", "layers.0.norm2", "layers.0.norm3", "norm"}) {
    expected.emplace_back(std::string(norm) + ".weight", std::vector<int64_t>{8});
    expected.emplace_back(std::string(norm) + ".bias", std::vector<int64_t>{8});
  }
  ASSERT_EQ(expected.size(), 28u);
  EXPECT_EQ(StateDictKeys(**model), expected);
  EXPECT_EQ(PythonClassName(**model), "TransformerDecoder");
  EXPECT_EQ(*InspectPath(**model, "layers.0.__class__"), "TransformerDecoderLayer");
}

TEST(TransformerBuildersTest, EncoderExampleHas18TensorsAndOptionalNorm) {
  ParamItems items = {{"n_layers", 1},
                      {"n_heads", 2},
                      {"query_dimensions", 4},
                      {"value_dimensions", 4},
                      {"feed_forward_dimensions", 8}};
  absl::StatusOr<TransformerEncoderBuilder> b = TransformerEncoderBuilder::FromDictionary(items);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<TransformerEncoderPtr> model = b->Build();
  ASSERT_TRUE(model.ok()) << model.status();
  const KeyShapes keys = StateDictKeys(**model);
  ASSERT_EQ(keys.size(), 18u);
  EXPECT_EQ(keys.front().first, "layers.0.attention.query_projection.weight");
  EXPECT_EQ(keys.back().first, "norm.bias");

  ASSERT_TRUE(b->Set("final_normalization", false).ok());
  model = b->Build();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(StateDictKeys(**model).size(), 16u);
  EXPECT_EQ(InspectPath(**model, "norm.__class__").status().code(), absl::StatusCode::kNotFound);
}

TEST(TransformerBuildersTest, FavorLinearEncoderStoresOmegaFirst) {
  absl::StatusOr<NamedFeatureMapFactory> favor =
      MakeFeatureMapFactory("Favor", nlohmann::json{{"n_dims", 6}});
  ASSERT_TRUE(favor.ok()) << favor.status();
  absl::StatusOr<TransformerEncoderBuilder> b =
      TransformerEncoderBuilder::FromDictionary({{"n_layers", 1},
                                                 {"n_heads", 2},
                                                 {"query_dimensions", 4},
                                                 {"value_dimensions", 4},
                                                 {"feed_forward_dimensions", 8},
                                                 {"attention_type", "linear"},
                                                 {"feature_map", *favor}});
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<TransformerEncoderPtr> model = b->Build();
  ASSERT_TRUE(model.ok()) << model.status();
  const KeyShapes keys = StateDictKeys(**model);
  ASSERT_EQ(keys.size(), 19u);
  EXPECT_EQ(keys.front().first, "layers.0.attention.inner_attention.feature_map.omega");
  EXPECT_EQ(keys.front().second, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(*InspectPath(**model, "layers.0.attention.inner_attention.feature_map.__class__"),
            "Favor");
}

TEST(TransformerBuildersTest, BuildAssemblesTheConfiguredLayers) {
  absl::StatusOr<TransformerDecoderBuilder> b =
      TransformerDecoderBuilder::FromDictionary({{"n_layers", 2},
                                                 {"n_heads", 2},
                                                 {"query_dimensions", 3},
                                                 {"value_dimensions", 5},
                                                 {"feed_forward_dimensions", 7},
                                                 {"cross_n_heads", 3},
                                                 {"cross_query_dimensions", 2},
                                                 {"cross_value_dimensions", 4},
                                                 {"self_attention_type", "causal-linear"},
                                                 {"cross_attention_type", "full"},
                                                 {"softmax_temp", 0.5},
                                                 {"activation", "gelu"},
                                                 {"dropout", 0.2}});
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<TransformerDecoderPtr> model = b->Build();
  ASSERT_TRUE(model.ok()) << model.status();
  auto inspect = [&](const std::string& path) {
    absl::StatusOr<nlohmann::json> v = InspectPath(**model, path);
    EXPECT_TRUE(v.ok()) << path << ": " << v.status();
    return v.ok() ? *v : nlohmann::json();
  };
  // d_model = 5 * 2; memory width = 3 * 4.
  EXPECT_EQ(inspect("layers.1.self_attention.query_projection.weight.shape"),
            nlohmann::json::array({6, 10}));
  EXPECT_EQ(inspect("layers.1.self_attention.out_projection.weight.shape"),
            nlohmann::json::array({10, 10}));
  EXPECT_EQ(inspect("layers.1.cross_attention.query_projection.weight.shape"),
            nlohmann::json::array({6, 10}));
  EXPECT_EQ(inspect("layers.1.cross_attention.key_projection.weight.shape"),
            nlohmann::json::array({6, 12}));
  EXPECT_EQ(inspect("layers.1.cross_attention.value_projection.weight.shape"),
            nlohmann::json::array({12, 12}));
  EXPECT_EQ(inspect("layers.1.cross_attention.out_projection.weight.shape"),
            nlohmann::json::array({10, 12}));
  EXPECT_EQ(inspect("layers.0.linear1.weight.shape"), nlohmann::json::array({7, 10}));
  EXPECT_EQ(inspect("layers.0.self_attention.inner_attention.__class__"), "CausalLinearAttention");
  EXPECT_EQ(inspect("layers.0.cross_attention.inner_attention.__class__"), "FullAttention");
  EXPECT_EQ(inspect("layers.0.cross_attention.inner_attention.softmax_temp"), 0.5);
  EXPECT_EQ(inspect("layers.0.dropout.p"), 0.2);
  EXPECT_EQ(inspect("norm.__class__"), "LayerNorm");
}

TEST(TransformerBuildersTest, LinearAttentionNeedsExplicitQueryDimensions) {
  absl::StatusOr<TransformerEncoderBuilder> b =
      TransformerEncoderBuilder::FromDictionary({{"attention_type", "linear"}});
  ASSERT_TRUE(b.ok()) << b.status();
  ExpectValue(*b, "query_dimensions", int64_t{64});
  absl::StatusOr<TransformerEncoderPtr> model = b->Build();
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.status().message(), "Invalid value None for parameter 'query_dimensions'");

  // With query_dimensions set every name of the stage builds, and the
  // top-level stage then holds two modules.
  b = TransformerEncoderBuilder::FromDictionary(
      {{"attention_type", "full,linear"}, {"query_dimensions", int64_t{8}}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->Build().status().message(), "Invalid attention_type argument 'full,linear'");
  b = TransformerEncoderBuilder::FromDictionary({{"attention_type", "conditional-full"}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->Build().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TransformerBuildersTest, EachBuildMakesFreshModules) {
  absl::StatusOr<TransformerEncoderBuilder> b = TransformerEncoderBuilder::FromDictionary(
      {{"n_layers", 1}, {"n_heads", 2}, {"query_dimensions", 4}, {"value_dimensions", 4}});
  ASSERT_TRUE(b.ok());
  absl::StatusOr<TransformerEncoderPtr> first = b->Build();
  absl::StatusOr<TransformerEncoderPtr> second = b->Build();
  ASSERT_TRUE(first.ok() && second.ok());
  const torch::Tensor w1 =
      (*first)->named_parameters()["layers.0.attention.query_projection.weight"];
  const torch::Tensor w2 =
      (*second)->named_parameters()["layers.0.attention.query_projection.weight"];
  EXPECT_FALSE(w1.is_same(w2));
  EXPECT_FALSE(torch::equal(w1, w2));
}

TEST(TransformerBuildersTest, RecurrentTwinsHaveTheBatchKeys) {
  const ParamItems encoder_items = {{"n_layers", 2},
                                    {"n_heads", 2},
                                    {"query_dimensions", 4},
                                    {"value_dimensions", 3},
                                    {"feed_forward_dimensions", 8},
                                    {"attention_type", "causal-linear"}};
  auto batch = TransformerEncoderBuilder::FromDictionary(encoder_items)->Build();
  auto recurrent = RecurrentEncoderBuilder::FromDictionary(encoder_items)->Build();
  ASSERT_TRUE(batch.ok() && recurrent.ok()) << batch.status() << recurrent.status();
  EXPECT_EQ(StateDictKeys(**batch), StateDictKeys(**recurrent));
  EXPECT_EQ(*InspectPath(**recurrent, "layers.0.attention.inner_attention.__class__"),
            "RecurrentLinearAttention");
  EXPECT_EQ(*InspectPath(**recurrent, "layers.0.__class__"), "RecurrentTransformerEncoderLayer");

  const ParamItems decoder_items = {{"n_layers", 1},
                                    {"n_heads", 2},
                                    {"query_dimensions", 4},
                                    {"value_dimensions", 3},
                                    {"cross_model_dimensions", 5},
                                    {"self_attention_type", "causal-linear"},
                                    {"cross_attention_type", "linear"}};
  auto batch_decoder = TransformerDecoderBuilder::FromDictionary(decoder_items)->Build();
  auto recurrent_decoder = RecurrentDecoderBuilder::FromDictionary(decoder_items)->Build();
  ASSERT_TRUE(batch_decoder.ok() && recurrent_decoder.ok())
      << batch_decoder.status() << recurrent_decoder.status();
  EXPECT_EQ(StateDictKeys(**batch_decoder), StateDictKeys(**recurrent_decoder));
  EXPECT_EQ(*InspectPath(**recurrent_decoder, "layers.0.cross_attention.__class__"),
            "RecurrentCrossAttentionLayer");
  EXPECT_EQ(
      *InspectPath(**recurrent_decoder, "layers.0.cross_attention.key_projection.weight.shape"),
      nlohmann::json::array({8, 5}));
}

TEST(TransformerBuildersTest, MirroredTwinsShareWeightsAndAgree) {
  const ParamItems items = {{"n_layers", 2},
                            {"n_heads", 2},
                            {"query_dimensions", 4},
                            {"value_dimensions", 4},
                            {"feed_forward_dimensions", 16},
                            {"attention_type", "causal-linear"}};
  auto batch = TransformerEncoderBuilder::FromDictionary(items)->Build();
  auto recurrent = RecurrentEncoderBuilder::FromDictionary(items)->Build();
  ASSERT_TRUE(batch.ok() && recurrent.ok());
  ASSERT_TRUE(MakeMirror(**batch, **recurrent).ok());
  (*batch)->eval();
  (*recurrent)->eval();
  torch::NoGradGuard no_grad;
  // In-place changes to the source are seen by the mirror.
  (*batch)->named_parameters()["layers.1.norm2.weight"].mul_(1.5);
  EXPECT_TRUE(torch::equal((*batch)->named_parameters()["layers.1.norm2.weight"],
                           (*recurrent)->named_parameters()["layers.1.norm2.weight"]));

  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({2, 5, 8});
  const torch::Tensor batch_out = (*batch)->forward(x, Mask::TriangularCausal(5));
  RecurrentEncoderState state;
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < 5; ++i) steps.push_back((*recurrent)->forward(x.select(1, i), state));
  EXPECT_TRUE(torch::allclose(torch::stack(steps, 1), batch_out, 1e-5, 1e-5));

  // Mismatched models are refused without sharing anything.
  auto other = TransformerEncoderBuilder::FromDictionary(
                   {{"n_layers", 1}, {"n_heads", 2}, {"query_dimensions", 2}})
                   ->Build();
  ASSERT_TRUE(other.ok());
  absl::Status refused = MakeMirror(**batch, **other);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("'layers.1.norm2.weight' is missing"), std::string::npos)
      << refused;
}

}  // namespace
}  // namespace performer
