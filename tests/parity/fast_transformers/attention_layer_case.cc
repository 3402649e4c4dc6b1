// Runner for kind "attention_layer": AttentionLayer(inner, d_model, n_heads,
// d_keys?, d_values?, d_model_keys?) with the inner attention built by
// AttentionBuilder from construct.inner = {builder, attention_type, params};
// the layer state dict is loaded strictly, feature maps are frozen (loaded
// omega, no redraw), eval mode; compares `output` with the case tolerance.
//
// Masks follow the recipe: attn_mask "full" / "triangular" / "custom";
// query_lengths / key_lengths are LengthMask(v, L or S) when the inputs hold
// them, full length masks otherwise.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/attention/attention_layer.h"
#include "core/builders/attention_builder.h"
#include "core/masks.h"
#include "tests/parity/case_runner.h"
#include "tests/parity/fast_transformers/fixture_masks.h"

namespace performer::testing {
namespace {

std::optional<int64_t> OptionalInt(const nlohmann::json& spec, const char* key) {
  if (!spec.contains(key) || spec.at(key).is_null()) return std::nullopt;
  return spec.at(key).get<int64_t>();
}

void RunAttentionLayerCase(const FixtureCase& c) {
  const nlohmann::json& construct = c.spec.at("construct");
  ASSERT_EQ(construct.at("class").get<std::string>(), "AttentionLayer");
  const nlohmann::json& inner = construct.at("inner");
  ASSERT_EQ(inner.at("builder").get<std::string>(), "AttentionBuilder");
  absl::StatusOr<AttentionBuilder> builder =
      AttentionBuilder::FromJson(inner.value("params", nlohmann::json::object()));
  ASSERT_TRUE(builder.ok()) << builder.status();
  absl::StatusOr<AttentionPtr> attention =
      builder->Build(inner.at("attention_type").get<std::string>());
  ASSERT_TRUE(attention.ok()) << attention.status();

  auto layer = std::make_shared<AttentionLayerImpl>(
      *attention, construct.at("d_model").get<int64_t>(), construct.at("n_heads").get<int64_t>(),
      OptionalInt(construct, "d_keys"), OptionalInt(construct, "d_values"),
      OptionalInt(construct, "d_model_keys"));
  ASSERT_NO_FATAL_FAILURE(PrepareLoadedModule(c, *layer));

  const torch::Tensor& queries = c.input("queries");
  const torch::Tensor& keys = c.input("keys");
  const torch::Tensor& values = c.input("values");
  const int64_t batch = queries.size(0);
  const int64_t query_length = queries.size(1);
  const int64_t key_length = keys.size(1);
  const AttentionMasks masks = RecipeAttentionMasks(c, batch, query_length, key_length);
  torch::Tensor output;
  {
    torch::NoGradGuard no_grad;
    output =
        layer->forward(queries, keys, values, masks.attn, masks.query_lengths, masks.key_lengths);
  }
  const torch::Tensor& expected = c.expect("output");
  ASSERT_EQ(output.sizes(), expected.sizes());
  EXPECT_TENSOR_CLOSE(output, expected, c.atol(), c.rtol());
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers", "attention_layer", RunAttentionLayerCase);

}  // namespace
}  // namespace performer::testing
