// Runner for kind "model" (encoder_* / decoder_*): builds the model with the
// builder named in construct (FromJson of construct.kwargs), loads params
// strictly, freezes feature maps, evaluates it in eval mode with the mask
// recipe and compares `output`. With a "recurrent" entry it also builds the
// recurrent twin, loads the same params, steps x[:, i] carrying the state and
// compares `recurrent_outputs`, every `final_state.*` tensor, and the
// recurrent outputs against the batch `output` (the twins agree).
//
// Masks follow the recipe (fixture_masks.h); absent entries mean the model's
// defaults.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "core/builders/transformer_builders.h"
#include "tests/parity/case_runner.h"
#include "tests/parity/fast_transformers/fixture_masks.h"

namespace performer::testing {
namespace {

// The expected final_state.layers.<i>.<rest> tensors by layer.
std::map<int64_t, std::map<std::string, torch::Tensor>> ExpectedFinalStates(const FixtureCase& c) {
  std::map<int64_t, std::map<std::string, torch::Tensor>> out;
  const std::string prefix = "final_state.layers.";
  for (const auto& [name, tensor] : c.expected) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    int64_t layer = 0;
    EXPECT_TRUE(dot != std::string::npos && absl::SimpleAtoi(rest.substr(0, dot), &layer))
        << "unexpected final_state key " << name;
    if (dot == std::string::npos) continue;
    out[layer][rest.substr(dot + 1)] = tensor;
  }
  return out;
}

// Compares `actual` (the state's tensors) with expected keys "<prefix><j>".
void CompareStateTensors(const FixtureCase& c, const std::string& what,
                         const std::vector<torch::Tensor>& actual,
                         const std::map<std::string, torch::Tensor>& expected,
                         const std::string& prefix) {
  size_t count = 0;
  for (const auto& [key, tensor] : expected) {
    if (key.rfind(prefix, 0) != 0) continue;
    size_t j = 0;
    ASSERT_TRUE(absl::SimpleAtoi(key.substr(prefix.size()), &j)) << what << " key " << key;
    ++count;
    ASSERT_LT(j, actual.size()) << what << ": the state has no element " << j;
    SCOPED_TRACE(what + " element " + std::to_string(j));
    EXPECT_TENSOR_CLOSE(actual[j], tensor, c.atol(), c.rtol());
  }
  EXPECT_EQ(count, actual.size()) << what << ": number of state tensors";
}

std::string MaskRecipe(const FixtureCase& c, const std::string& name) {
  const nlohmann::json masks = c.spec.value("masks", nlohmann::json::object());
  return masks.contains(name) ? masks.at(name).get<std::string>() : "";
}

// `batch_is_causal`: the batch model saw exactly what the recurrent twin
// sees (a causal self mask, no other masking of the twin's inputs).
void CompareRecurrentOutputs(const FixtureCase& c, const std::vector<torch::Tensor>& steps,
                             bool batch_is_causal) {
  ASSERT_FALSE(steps.empty());
  const torch::Tensor outputs = torch::stack(steps, 1);
  EXPECT_TENSOR_CLOSE(outputs, c.expect("recurrent_outputs"), c.atol(), c.rtol());
  // Stepping the twin reproduces the batch model under a causal mask.
  if (batch_is_causal) EXPECT_TENSOR_CLOSE(outputs, c.expect("output"), c.atol(), c.rtol());
}

void RunEncoder(const FixtureCase& c) {
  const nlohmann::json& construct = c.spec.at("construct");
  absl::StatusOr<TransformerEncoderBuilder> builder =
      TransformerEncoderBuilder::FromJson(construct.at("kwargs"));
  ASSERT_TRUE(builder.ok()) << builder.status();
  absl::StatusOr<TransformerEncoderPtr> model = builder->Build();
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NO_FATAL_FAILURE(PrepareLoadedModule(c, **model));

  torch::NoGradGuard no_grad;
  const torch::Tensor& x = c.input("x");
  const int64_t length = x.size(1);
  const torch::Tensor output = (*model)->forward(
      x, RecipeMatrixMask(c, "attn_mask", length, length), RecipeLengthMask(c, "lengths", length));
  EXPECT_TENSOR_CLOSE(output, c.expect("output"), c.atol(), c.rtol());

  if (!c.spec.contains("recurrent")) return;
  SCOPED_TRACE("recurrent twin");
  const nlohmann::json& recurrent = c.spec.at("recurrent");
  ASSERT_EQ(recurrent.at("builder").get<std::string>(), "RecurrentEncoderBuilder");
  absl::StatusOr<RecurrentEncoderBuilder> rbuilder =
      RecurrentEncoderBuilder::FromJson(recurrent.at("kwargs"));
  ASSERT_TRUE(rbuilder.ok()) << rbuilder.status();
  absl::StatusOr<RecurrentTransformerEncoderPtr> rmodel = rbuilder->Build();
  ASSERT_TRUE(rmodel.ok()) << rmodel.status();
  ASSERT_NO_FATAL_FAILURE(PrepareLoadedModule(c, **rmodel));

  RecurrentEncoderState state;
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < length; ++i) steps.push_back((*rmodel)->forward(x.select(1, i), state));
  CompareRecurrentOutputs(
      c, steps, MaskRecipe(c, "attn_mask") == "triangular" && c.inputs.count("lengths") == 0);

  const auto expected_states = ExpectedFinalStates(c);
  ASSERT_EQ(expected_states.size(), state.layers.size());
  for (const auto& [layer, tensors] : expected_states) {
    ASSERT_LT(static_cast<size_t>(layer), state.layers.size());
    CompareStateTensors(c, "layer " + std::to_string(layer), StateTensors(state.layers[layer]),
                        tensors, "");
  }
}

void RunDecoder(const FixtureCase& c) {
  const nlohmann::json& construct = c.spec.at("construct");
  absl::StatusOr<TransformerDecoderBuilder> builder =
      TransformerDecoderBuilder::FromJson(construct.at("kwargs"));
  ASSERT_TRUE(builder.ok()) << builder.status();
  absl::StatusOr<TransformerDecoderPtr> model = builder->Build();
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NO_FATAL_FAILURE(PrepareLoadedModule(c, **model));

  torch::NoGradGuard no_grad;
  const torch::Tensor& x = c.input("x");
  const torch::Tensor& memory = c.input("memory");
  const int64_t length = x.size(1);
  const int64_t memory_length = memory.size(1);
  const std::optional<Mask> memory_lengths = RecipeLengthMask(c, "memory_lengths", memory_length);
  const torch::Tensor output =
      (*model)->forward(x, memory, RecipeMatrixMask(c, "x_mask", length, length),
                        RecipeLengthMask(c, "x_lengths", length),
                        RecipeMatrixMask(c, "memory_mask", length, memory_length), memory_lengths);
  EXPECT_TENSOR_CLOSE(output, c.expect("output"), c.atol(), c.rtol());

  if (!c.spec.contains("recurrent")) return;
  SCOPED_TRACE("recurrent twin");
  const nlohmann::json& recurrent = c.spec.at("recurrent");
  ASSERT_EQ(recurrent.at("builder").get<std::string>(), "RecurrentDecoderBuilder");
  absl::StatusOr<RecurrentDecoderBuilder> rbuilder =
      RecurrentDecoderBuilder::FromJson(recurrent.at("kwargs"));
  ASSERT_TRUE(rbuilder.ok()) << rbuilder.status();
  absl::StatusOr<RecurrentTransformerDecoderPtr> rmodel = rbuilder->Build();
  ASSERT_TRUE(rmodel.ok()) << rmodel.status();
  ASSERT_NO_FATAL_FAILURE(PrepareLoadedModule(c, **rmodel));

  RecurrentDecoderState state;
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < length; ++i) {
    steps.push_back((*rmodel)->forward(x.select(1, i), memory, memory_lengths, state));
  }
  const std::string memory_mask = MaskRecipe(c, "memory_mask");
  CompareRecurrentOutputs(c, steps,
                          MaskRecipe(c, "x_mask") == "triangular" &&
                              c.inputs.count("x_lengths") == 0 &&
                              (memory_mask.empty() || memory_mask == "full"));

  const auto expected_states = ExpectedFinalStates(c);
  ASSERT_EQ(expected_states.size(), state.layers.size());
  for (const auto& [layer, tensors] : expected_states) {
    ASSERT_LT(static_cast<size_t>(layer), state.layers.size());
    const std::string what = "layer " + std::to_string(layer);
    CompareStateTensors(c, what + " self", StateTensors(state.layers[layer].self), tensors,
                        "self.");
    CompareStateTensors(c, what + " cross", StateTensors(state.layers[layer].cross), tensors,
                        "cross.");
  }
}

void RunModelCase(const FixtureCase& c) {
  const std::string builder = c.spec.at("construct").at("builder").get<std::string>();
  if (builder == "TransformerEncoderBuilder") {
    RunEncoder(c);
  } else if (builder == "TransformerDecoderBuilder") {
    RunDecoder(c);
  } else {
    FAIL() << "model case with unknown builder " << builder;
  }
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers", "model", RunModelCase);

}  // namespace
}  // namespace performer::testing
