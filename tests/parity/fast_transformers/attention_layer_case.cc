// Runner for kind "attention_layer": AttentionLayer(inner, d_model, n_heads,
// d_keys?, d_values?, d_model_keys?) with the inner attention built from its
// recipe through the attention registry, the layer state dict loaded
// strictly, feature maps frozen, eval mode; compares `output`.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/attention/attention_layer.h"
#include "core/attention/attention_registries.h"
#include "core/feature_maps/feature_map.h"
#include "core/feature_maps/feature_map_catalogue.h"
#include "core/masks.h"
#include "tests/parity/case_runner.h"

namespace performer::testing {
namespace {

std::optional<int64_t> OptionalInt(const nlohmann::json& spec, const char* key) {
  if (!spec.contains(key) || spec.at(key).is_null()) return std::nullopt;
  return spec.at(key).get<int64_t>();
}

// The attention-builder parameters of a recipe, feature maps resolved.
absl::StatusOr<ParamMap> RecipeParams(const nlohmann::json& params) {
  ParamMap out;
  if (params.is_null()) return out;
  for (const auto& [name, value] : params.items()) {
    if (name == "feature_map") {
      absl::StatusOr<NamedFeatureMapFactory> factory = FeatureMapFactoryFromJson(value);
      if (!factory.ok()) return factory.status();
      out.emplace(name, ParamValue(*std::move(factory)));
      continue;
    }
    ParamValue scalar;
    if (!ParamValueFromJsonScalar(value, &scalar)) {
      return absl::InvalidArgumentError("non-scalar attention parameter " + name);
    }
    out.emplace(name, scalar);
  }
  return out;
}

// attn_mask recipe: "full", "triangular" or "custom" (a bool input tensor).
Mask AttentionMaskFromRecipe(const FixtureCase& c, const std::string& recipe, int64_t l,
                             int64_t s) {
  if (recipe == "triangular") return Mask::TriangularCausal(l);
  if (recipe == "custom") {
    absl::StatusOr<Mask> m = Mask::FromBool(c.input("attn_mask"));
    TORCH_CHECK(m.ok(), m.status().ToString());
    return *m;
  }
  TORCH_CHECK(recipe == "full", "unknown attn_mask recipe ", recipe);
  return Mask::Full(l, s);
}

// LengthMask(v, max_len) from inputs[name] when present, else all-full.
Mask LengthsFromInputs(const FixtureCase& c, const std::string& name, int64_t n, int64_t max_len) {
  auto it = c.inputs.find(name);
  if (it != c.inputs.end()) return Mask::Lengths(it->second, max_len);
  return Mask::Lengths(torch::full({n}, max_len, torch::kLong), max_len);
}

void RunAttentionLayerCase(const FixtureCase& c) {
  const nlohmann::json& construct = c.spec.at("construct");
  const nlohmann::json& inner = construct.at("inner");
  const std::string attention_type = inner.at("attention_type");
  ASSERT_EQ(attention_type.find_first_of(":,"), std::string::npos)
      << "composed attention types need the attention builder: " << attention_type;
  absl::StatusOr<ParamMap> params = RecipeParams(inner.value("params", nlohmann::json()));
  ASSERT_TRUE(params.ok()) << params.status();
  absl::StatusOr<AttentionPtr> attention =
      GlobalAttentionRegistry().Create(attention_type, {}, *params);
  ASSERT_TRUE(attention.ok()) << attention.status();

  auto layer = std::make_shared<AttentionLayerImpl>(
      *attention, construct.at("d_model").get<int64_t>(), construct.at("n_heads").get<int64_t>(),
      OptionalInt(construct, "d_keys"), OptionalInt(construct, "d_values"),
      OptionalInt(construct, "d_model_keys"));

  // Strict load: every module tensor is in params and vice versa.
  {
    torch::NoGradGuard no_grad;
    size_t loaded = 0;
    auto load = [&](const std::string& name, torch::Tensor& tensor) {
      auto it = c.params.find(name);
      ASSERT_NE(it, c.params.end()) << "params lack " << name;
      ASSERT_EQ(it->second.sizes(), tensor.sizes()) << name;
      tensor.copy_(it->second);
      ++loaded;
    };
    for (auto& p : layer->named_parameters()) load(p.key(), p.value());
    for (auto& b : layer->named_buffers()) load(b.key(), b.value());
    ASSERT_EQ(loaded, c.params.size()) << "params hold tensors the layer does not have";
  }
  for (const auto& module : layer->modules()) {
    if (auto* fm = dynamic_cast<FeatureMapImpl*>(module.get())) fm->set_frozen(true);
  }
  layer->eval();

  const torch::Tensor& queries = c.input("queries");
  const torch::Tensor& keys = c.input("keys");
  const torch::Tensor& values = c.input("values");
  const int64_t n = queries.size(0);
  const int64_t l = queries.size(1);
  const int64_t s = keys.size(1);
  const nlohmann::json masks = c.spec.value("masks", nlohmann::json::object());
  const Mask attn_mask = AttentionMaskFromRecipe(c, masks.value("attn_mask", "full"), l, s);
  const Mask query_lengths = LengthsFromInputs(c, "query_lengths", n, l);
  const Mask key_lengths = LengthsFromInputs(c, "key_lengths", n, s);
  torch::Tensor output;
  {
    torch::NoGradGuard no_grad;
    output = layer->forward(queries, keys, values, attn_mask, query_lengths, key_lengths);
  }
  EXPECT_TENSOR_CLOSE(output, c.expect("output"), c.atol(), c.rtol());
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers", "attention_layer", RunAttentionLayerCase);

}  // namespace
}  // namespace performer::testing
