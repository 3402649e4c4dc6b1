#include "tests/parity/fast_transformers/fixture_masks.h"

#include <gtest/gtest.h>

#include "core/feature_maps/feature_map.h"
#include "core/io/state_dict.h"

namespace performer::testing {

std::optional<Mask> RecipeMatrixMask(const FixtureCase& c, const std::string& name, int64_t rows,
                                     int64_t cols) {
  const nlohmann::json masks = c.spec.value("masks", nlohmann::json::object());
  if (!masks.contains(name)) return std::nullopt;
  const std::string recipe = masks.at(name).get<std::string>();
  if (recipe == "full") return Mask::Full(rows, cols, c.device);
  if (recipe == "triangular") {
    TORCH_CHECK(rows == cols, c.name, ": a triangular ", name, " needs L == S");
    return Mask::TriangularCausal(rows, c.device);
  }
  TORCH_CHECK(recipe == "custom", c.name, ": unknown mask recipe '", recipe, "' for ", name);
  absl::StatusOr<Mask> mask = Mask::FromBool(c.input(name));
  TORCH_CHECK(mask.ok(), c.name, ": ", mask.status().ToString());
  return *mask;
}

std::optional<Mask> RecipeLengthMask(const FixtureCase& c, const std::string& name,
                                     int64_t max_len) {
  if (c.inputs.count(name) == 0) return std::nullopt;
  return Mask::Lengths(c.input(name), max_len, c.device);
}

namespace {

// The length mask from input `name`, or all `length` positions valid.
Mask RecipeLengthMaskOrFull(const FixtureCase& c, const std::string& name, int64_t batch,
                            int64_t length) {
  if (std::optional<Mask> mask = RecipeLengthMask(c, name, length)) return *mask;
  return Mask::Lengths(torch::full({batch}, length, torch::kInt64), length, c.device);
}

}  // namespace

AttentionMasks RecipeAttentionMasks(const FixtureCase& c, int64_t batch, int64_t query_length,
                                    int64_t key_length) {
  std::optional<Mask> attn = RecipeMatrixMask(c, "attn_mask", query_length, key_length);
  return {attn ? *attn : Mask::Full(query_length, key_length, c.device),
          RecipeLengthMaskOrFull(c, "query_lengths", batch, query_length),
          RecipeLengthMaskOrFull(c, "key_lengths", batch, key_length)};
}

void PrepareLoadedModule(const FixtureCase& c, torch::nn::Module& module) {
  absl::Status loaded = io::LoadStateDict(module, c.params, /*strict=*/true);
  ASSERT_TRUE(loaded.ok()) << loaded;
  for (const std::shared_ptr<torch::nn::Module>& m : module.modules(/*include_self=*/true)) {
    if (auto* feature_map = dynamic_cast<FeatureMapImpl*>(m.get())) feature_map->set_frozen(true);
  }
  module.eval();
  module.to(c.device);
}

}  // namespace performer::testing
