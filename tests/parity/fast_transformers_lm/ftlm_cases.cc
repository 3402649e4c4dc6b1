// Runner for the FastTransformersLM fixtures (model folders built with
// fast-transformers' builders, tests/fixtures/fast_transformers_lm/README.md):
// the batch forward's logits, and the greedy continuation of the recurrent
// twin through the server's decoder (FastTransformersDecoder: the slot form
// of the library's recurrent attentions, prompt prefilled as one chunk).
// Every check case.json lists is run by name; an unknown one fails.
#include <gtest/gtest.h>

#include "core/decoding/decoder_factory.h"
#include "core/decoding/generate.h"
#include "core/generation/sampling_params.h"
#include "core/models/model_folder.h"
#include "tests/parity/case_runner.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

std::vector<int64_t> ToVector(const torch::Tensor& t) {
  torch::Tensor flat = t.reshape(-1).to(torch::kCPU).to(torch::kLong).contiguous();
  return std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
}

void RunFastTransformersLM(const FixtureCase& c) {
  absl::StatusOr<models::LoadedModel> model = models::LoadModelFolder(c.dir);
  ASSERT_TRUE(model.ok()) << model.status();
  model->MoveTo(c.device);
  const double logits_atol = c.spec["tolerance"].value("logits", 1e-4);
  for (const auto& check : c.spec.at("checks")) {
    const std::string name = check.at("name");
    SCOPED_TRACE(c.name + " / " + name);
    if (name == "logits") {
      torch::NoGradGuard no_grad;
      const torch::Tensor logits = model->ftlm->forward(c.input(check.at("input")));
      EXPECT_TENSOR_CLOSE(logits.to(torch::kCPU), c.expect(check.at("output")), logits_atol, 1e-4);
    } else if (name == "greedy_generate") {
      absl::StatusOr<std::unique_ptr<decoding::SequenceDecoder>> decoder =
          decoding::CreateDecoder(*model, 2);
      ASSERT_TRUE(decoder.ok()) << decoder.status();
      const torch::Tensor expected = c.expect(check.at("tokens"));
      generation::SamplingParams greedy = generation::SamplingParams::Greedy();
      greedy.max_new_tokens = expected.numel();
      decoding::PrefillRequest request;
      request.prompt = ToVector(c.input(check.at("prompt")));
      absl::StatusOr<decoding::GenerationResult> result =
          decoding::Generate(**decoder, request, greedy);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->tokens, ToVector(expected)) << c.name << ": recurrent greedy tokens";
      EXPECT_EQ((*decoder)->active(), 0);
    } else {
      ADD_FAILURE() << c.name << ": check '" << name << "' is not supported by this port";
    }
  }
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers_lm", "FastTransformersLM", RunFastTransformersLM);

}  // namespace
}  // namespace performer::testing
