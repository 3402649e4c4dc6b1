// Runner for kind "attention" (attn_*): builds the inner attention with
// AttentionBuilder from construct = {builder, attention_type, params}, loads
// the case's state dict strictly, freezes every feature map (so the loaded
// omega is used instead of being redrawn), evaluates in eval mode and
// compares the output with the case tolerance.
//
// Masks follow the recipe: attn_mask "full" / "triangular" / "custom";
// query_lengths / key_lengths are LengthMask(v, L or S) when the inputs hold
// them, full length masks otherwise. Local-attention cases mark degenerate
// rows in rows_well_defined; the port reproduces those rows exactly, so all
// rows are compared (the well-defined ones first, for a clearer message).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/builders/attention_builder.h"
#include "core/masks.h"
#include "tests/parity/case_runner.h"
#include "tests/parity/fast_transformers/fixture_masks.h"

namespace performer::testing {
namespace {

void RunAttentionCase(const FixtureCase& c) {
  const nlohmann::json& construct = c.spec.at("construct");
  ASSERT_EQ(construct.at("builder").get<std::string>(), "AttentionBuilder");
  const std::string attention_type = construct.at("attention_type");
  absl::StatusOr<AttentionBuilder> builder =
      AttentionBuilder::FromJson(construct.value("params", nlohmann::json::object()));
  ASSERT_TRUE(builder.ok()) << builder.status();
  absl::StatusOr<AttentionPtr> attention = builder->Build(attention_type);
  ASSERT_TRUE(attention.ok()) << attention.status();

  ASSERT_NO_FATAL_FAILURE(PrepareLoadedModule(c, **attention));

  const torch::Tensor& queries = c.input("queries");
  const torch::Tensor& keys = c.input("keys");
  const torch::Tensor& values = c.input("values");
  const int64_t batch = queries.size(0);
  const int64_t query_length = queries.size(1);
  const int64_t key_length = keys.size(1);
  ASSERT_TRUE(c.spec.contains("masks")) << "attention cases name their masks";
  const AttentionMasks masks = RecipeAttentionMasks(c, batch, query_length, key_length);

  torch::Tensor output;
  {
    torch::NoGradGuard no_grad;
    output =
        (*attention)
            ->forward(queries, keys, values, masks.attn, masks.query_lengths, masks.key_lengths);
  }
  const torch::Tensor& expected = c.expect("output");
  ASSERT_EQ(output.sizes(), expected.sizes());

  if (c.spec.contains("rows_well_defined")) {
    std::vector<std::vector<bool>> rows = c.spec.at("rows_well_defined");
    torch::Tensor well_defined = torch::zeros({batch, query_length}, torch::kBool);
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t l = 0; l < query_length; ++l) well_defined[n][l] = static_cast<bool>(rows[n][l]);
    }
    // Expected outputs stay on the CPU whatever the case's device, so the
    // rows are picked on the CPU.
    SCOPED_TRACE("rows whose window holds a valid key");
    EXPECT_TENSOR_CLOSE(output.cpu().index({well_defined}), expected.index({well_defined}),
                        c.atol(), c.rtol());
  }
  EXPECT_TENSOR_CLOSE(output, expected, c.atol(), c.rtol());
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers", "attention", RunAttentionCase);

}  // namespace
}  // namespace performer::testing
