// Runners for the performer-pytorch fixtures (one per model_class). Every
// check listed in case.json is run by name; a check this port does not know
// fails the case, so new fixture kinds cannot pass silently.
#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "core/decoding/generate.h"
#include "core/decoding/performer_decoder.h"
#include "core/generation/sampling_params.h"
#include "core/models/model_folder.h"
#include "tests/parity/case_runner.h"
#include "tests/testing/fixtures.h"

namespace performer::testing {
namespace {

// The recurrent decoder keeps cached lower-layer outputs when a key
// stabiliser grows (docs/reference/performer-pytorch.md §9.1): step logits may
// differ from the full forward's by up to 1e-3.
constexpr double kRecurrentStepAtol = 1e-3;

struct Tolerance {
  double atol = 1e-4;
  double rtol = 1e-4;
};

Tolerance ToleranceOf(const nlohmann::json& check, const char* key = "tolerance") {
  Tolerance t;
  if (check.contains(key)) {
    t.atol = check[key].value("atol", t.atol);
    t.rtol = check[key].value("rtol", t.rtol);
  }
  return t;
}

bool Has(const FixtureCase& c, const std::string& name) {
  return c.inputs.count(name) > 0 || c.expected.count(name) > 0;
}

// By value: a reference bound to the result of a call with a temporary
// argument is a dangling-reference warning (an error here) on GCC 13.
torch::Tensor Get(const FixtureCase& c, const std::string& name) {
  auto it = c.inputs.find(name);
  if (it != c.inputs.end()) return it->second;
  return c.expect(name);
}

// Loads the case's model folder onto the case's device.
models::LoadedModel LoadOrFail(const FixtureCase& c) {
  absl::StatusOr<models::LoadedModel> model = models::LoadModelFolder(c.dir);
  if (!model.ok()) throw std::runtime_error(std::string(model.status().message()));
  model->MoveTo(c.device);
  return *std::move(model);
}

std::vector<int64_t> ToVector(const torch::Tensor& t) {
  torch::Tensor flat = t.reshape(-1).to(torch::kCPU).to(torch::kLong).contiguous();
  return std::vector<int64_t>(flat.data_ptr<int64_t>(), flat.data_ptr<int64_t>() + flat.numel());
}

std::vector<bool> ToBoolVector(const torch::Tensor& t) {
  std::vector<int64_t> v = ToVector(t);
  return std::vector<bool>(v.begin(), v.end());
}

// Greedy through the recurrent decoder; compares tokens exactly and each
// step's logits within kRecurrentStepAtol.
void CheckRecurrentGreedy(const FixtureCase& c, models::LoadedModel model,
                          const decoding::PrefillRequest& request, const torch::Tensor& tokens,
                          const torch::Tensor& step_logits, std::optional<int64_t> eos,
                          const std::string& with_eos_name) {
  absl::StatusOr<std::unique_ptr<decoding::PerformerDecoder>> decoder =
      decoding::PerformerDecoder::Create(std::move(model), 4);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  generation::SamplingParams greedy = generation::SamplingParams::Greedy();
  greedy.max_new_tokens = tokens.size(-1);
  absl::StatusOr<decoding::GenerationResult> result =
      decoding::Generate(**decoder, request, greedy, /*keep_logits=*/true);
  ASSERT_TRUE(result.ok()) << c.name << ": " << result.status();
  EXPECT_EQ(result->tokens, ToVector(tokens)) << c.name << ": recurrent greedy tokens";
  ASSERT_EQ(result->step_logits.size(), static_cast<size_t>(step_logits.size(0)));
  for (size_t k = 0; k < result->step_logits.size(); ++k) {
    SCOPED_TRACE(c.name + ": recurrent step " + std::to_string(k));
    EXPECT_TENSOR_CLOSE(result->step_logits[k], step_logits[static_cast<int64_t>(k)],
                        kRecurrentStepAtol, 1e-4);
  }
  EXPECT_EQ((*decoder)->active(), 0);
  if (eos.has_value() && !with_eos_name.empty()) {
    greedy.eos_token_id = eos;
    absl::StatusOr<decoding::GenerationResult> stopped =
        decoding::Generate(**decoder, request, greedy);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    EXPECT_EQ(stopped->tokens, ToVector(c.expect(with_eos_name))) << c.name << ": with eos";
  }
}

using CheckFn = std::function<void(const nlohmann::json& check, const Tolerance& tol)>;

// Runs every check case.json lists, by name; a check without a handler
// fails the case, so new fixture kinds cannot pass silently.
void RunChecks(const FixtureCase& c, const std::map<std::string, CheckFn>& handlers) {
  for (const auto& check : c.spec.at("checks")) {
    const std::string name = check.at("name");
    SCOPED_TRACE(c.name + " / " + name);
    auto it = handlers.find(name);
    if (it == handlers.end()) {
      ADD_FAILURE() << c.name << ": check '" << name << "' is not supported by this port";
      continue;
    }
    it->second(check, ToleranceOf(check));
  }
}

void RunPerformerLM(const FixtureCase& c) {
  models::LoadedModel model = LoadOrFail(c);
  models::PerformerLM lm = model.lm;
  torch::NoGradGuard no_grad;
  RunChecks(
      c,
      {{"full_forward_logits",
        [&](const nlohmann::json&, const Tolerance& tol) {
          models::LMForwardOptions o;
          if (Has(c, "mask")) o.mask = Get(c, "mask");
          models::DebugTrace trace;
          o.trace = &trace;
          EXPECT_TENSOR_CLOSE(lm(Get(c, "tokens"), o), c.expect("logits"), tol.atol, tol.rtol);
          for (const auto& [key, tensor] : trace) {
            if (Has(c, "debug." + key)) {
              SCOPED_TRACE(key);
              EXPECT_TENSOR_CLOSE(tensor, c.expect("debug." + key), tol.atol, tol.rtol);
            }
          }
          if (Has(c, "encodings")) {
            o.trace = nullptr;
            o.return_encodings = true;
            EXPECT_TENSOR_CLOSE(lm(Get(c, "tokens"), o), c.expect("encodings"), tol.atol, tol.rtol);
          }
        }},
       {"forward_without_mask",
        [&](const nlohmann::json&, const Tolerance& tol) {
          EXPECT_TENSOR_CLOSE(lm(Get(c, "tokens_nomask")), c.expect("logits_nomask"), tol.atol,
                              tol.rtol);
        }},
       {"padding_changes_real_positions",
        [&](const nlohmann::json&, const Tolerance& tol) {
          EXPECT_TENSOR_CLOSE(lm(Get(c, "tokens_unpadded")), c.expect("logits_unpadded"), tol.atol,
                              tol.rtol);
        }},
       {"greedy_continuation", [&](const nlohmann::json& check, const Tolerance&) {
          const Tolerance step_tol = ToleranceOf(check, "tolerance_step_logits");
          const torch::Tensor& expected_tokens = c.expect("greedy_tokens");
          const torch::Tensor& step_logits = c.expect("greedy_step_logits");
          // 1. The reference's own procedure (full re-forward every step).
          torch::Tensor seq = Get(c, "prompt");
          for (int64_t k = 0; k < expected_tokens.size(1); ++k) {
            torch::Tensor logits = lm(seq).select(1, seq.size(1) - 1);
            SCOPED_TRACE("re-forward step " + std::to_string(k));
            EXPECT_TENSOR_CLOSE(logits[0], step_logits[k], step_tol.atol, step_tol.rtol);
            torch::Tensor next = logits.argmax(-1, /*keepdim=*/true);
            EXPECT_EQ(next.item<int64_t>(), expected_tokens[0][k].item<int64_t>()) << "step " << k;
            seq = torch::cat({seq, next}, 1);
          }
          // 2. The recurrent decoder.
          decoding::PrefillRequest request;
          request.prompt = ToVector(Get(c, "prompt"));
          CheckRecurrentGreedy(c, model, request, expected_tokens, step_logits, std::nullopt, "");
        }}});
}

void RunPerformerEncDec(const FixtureCase& c) {
  models::LoadedModel model = LoadOrFail(c);
  models::PerformerEncDec encdec = model.encdec;
  torch::NoGradGuard no_grad;
  RunChecks(c,
            {{"encoder",
              [&](const nlohmann::json&, const Tolerance& tol) {
                EXPECT_TENSOR_CLOSE(encdec->Encode(Get(c, "enc_tokens"), Get(c, "enc_mask")),
                                    c.expect("encodings"), tol.atol, tol.rtol);
              }},
             {"decoder_logits",
              [&](const nlohmann::json&, const Tolerance& tol) {
                torch::Tensor own = encdec->Encode(Get(c, "enc_tokens"), Get(c, "enc_mask"));
                for (const torch::Tensor& encodings : {c.expect("encodings").to(c.device), own}) {
                  EXPECT_TENSOR_CLOSE(
                      encdec->DecoderLogits(Get(c, "dec_tokens"), encodings, Get(c, "enc_mask")),
                      c.expect("dec_logits"), tol.atol, tol.rtol);
                }
              }},
             {"training_loss",
              [&](const nlohmann::json&, const Tolerance& tol) {
                EXPECT_TENSOR_CLOSE(
                    encdec->Loss(Get(c, "enc_tokens"), Get(c, "dec_tokens"), Get(c, "enc_mask")),
                    c.expect("loss"), tol.atol, tol.rtol);
              }},
             {"greedy_generate", [&](const nlohmann::json& check, const Tolerance& tol) {
                const torch::Tensor enc_mask = Get(c, "gen_enc_mask");
                torch::Tensor encodings = encdec->Encode(Get(c, "gen_enc_tokens"), enc_mask);
                EXPECT_TENSOR_CLOSE(encodings, c.expect("gen_encodings"), tol.atol, tol.rtol);
                decoding::PrefillRequest request;
                request.prompt = ToVector(Get(c, "gen_start"));
                request.source = ToVector(Get(c, "gen_enc_tokens"));
                request.source_mask = ToBoolVector(enc_mask);
                std::optional<int64_t> eos;
                if (check.contains("eos_token")) eos = check["eos_token"].get<int64_t>();
                std::string with_eos =
                    check.contains("with_eos") ? check["with_eos"].value("expected", "") : "";
                CheckRecurrentGreedy(c, model, request, c.expect("gen_tokens"),
                                     c.expect("gen_step_logits"), eos, with_eos);
              }}});
}

void RunFastAttention(const FixtureCase& c) {
  models::LoadedModel model = LoadOrFail(c);
  torch::NoGradGuard no_grad;
  RunChecks(c, {{"fast_attention", [&](const nlohmann::json&, const Tolerance& tol) {
                   const torch::Tensor q = Get(c, "q"), k = Get(c, "k"), v = Get(c, "v");
                   EXPECT_TENSOR_CLOSE(model.fast_attention(q, k, v), c.expect("out"), tol.atol,
                                       tol.rtol);
                   if (Has(c, "debug.q_prime")) {
                     EXPECT_TENSOR_CLOSE(model.fast_attention->QueryFeatures(q),
                                         c.expect("debug.q_prime"), tol.atol, tol.rtol);
                   }
                   if (Has(c, "debug.k_prime")) {
                     EXPECT_TENSOR_CLOSE(model.fast_attention->KeyFeatures(k),
                                         c.expect("debug.k_prime"), tol.atol, tol.rtol);
                   }
                 }}});
}

PERFORMER_REGISTER_CASE_RUNNER("performer", "PerformerLM", RunPerformerLM);
PERFORMER_REGISTER_CASE_RUNNER("performer", "PerformerEncDec", RunPerformerEncDec);
PERFORMER_REGISTER_CASE_RUNNER("performer", "FastAttention", RunFastAttention);

}  // namespace
}  // namespace performer::testing
