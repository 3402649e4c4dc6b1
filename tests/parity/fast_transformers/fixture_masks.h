// What the fast-transformers runners share: the masks a case's recipe names,
// built on the case's device, and the preparation of a loaded module.
//
// Mask recipe (spec "masks"): attn_mask / x_mask / memory_mask are "full",
// "triangular" or "custom" (the bool tensor of the same name in inputs);
// lengths are int64 input vectors giving LengthMask(v, L or S).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <string>

#include "core/masks.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {

// The matrix mask `name` of the recipe, or nullopt when the recipe has none.
std::optional<Mask> RecipeMatrixMask(const FixtureCase& c, const std::string& name, int64_t rows,
                                     int64_t cols);

// The length mask from input `name`, or nullopt when the case has none.
std::optional<Mask> RecipeLengthMask(const FixtureCase& c, const std::string& name,
                                     int64_t max_len);

// The three masks of an attention call (AttentionLayer / inner attention):
// the recipe's attn_mask (full when it names none) and the query_lengths /
// key_lengths inputs (all positions when absent).
struct AttentionMasks {
  Mask attn, query_lengths, key_lengths;
};
AttentionMasks RecipeAttentionMasks(const FixtureCase& c, int64_t batch, int64_t query_length,
                                    int64_t key_length);

// Loads the case's params strictly (every key, same shapes), stops
// feature-map resampling, switches to eval mode and moves the module to the
// case's device.
void PrepareLoadedModule(const FixtureCase& c, torch::nn::Module& module);

}  // namespace performer::testing
