// Per-request sampling configuration for autoregressive generation.
//
// The knobs mirror performer-pytorch's AutoregressiveWrapper.generate
// (temperature, filter_thres for its top_k filter, repetition_penalty, an eos
// token) plus the usual server extras (top_k as a plain count, nucleus top_p,
// explicit stop tokens, a per-request seed). TokenSampler consumes them;
// CheckStop (stop_rules.h) decides when a sequence is finished.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace performer::generation {

// Plain value type; every field has an "off" default so that a
// default-constructed SamplingParams samples from the unmodified softmax.
// Validate with ValidateSamplingParams before use: TokenSampler does not fail,
// it only clamps out-of-range values defensively.
struct SamplingParams {
  // 0 = greedy (argmax, ties -> lowest id, no random draw, seed ignored);
  // > 0: sample from softmax(processed_logits / temperature).
  float temperature = 1.0f;
  // Keep the top_k largest logits, the others become -inf. 0 = off.
  int64_t top_k = 0;
  // The reference's top-k form: k = int((1 - filter_thres) * vocab), in
  // double precision like the Python expression (0.9 with vocab 100 keeps 9,
  // because 1 - 0.9 is 0.09999999999999998). Unset = off. Applied after top_k
  // when both are set (so the smaller k wins).
  std::optional<double> filter_thres;
  // Nucleus filter: keep the smallest prefix of the descending-sorted tokens
  // whose cumulative probability exceeds top_p; the first token is always
  // kept. 1 = off.
  float top_p = 1.0f;
  // Reference repetition penalty theta: applied only when > 1 (values in
  // (0, 1] are accepted and have no effect, like in the reference).
  float repetition_penalty = 1.0f;
  // Seed of the sampler's private generator; unset = std::random_device.
  std::optional<uint64_t> seed;
  // Upper bound on generated tokens (the eos/stop token counts).
  int64_t max_new_tokens = 16;
  // Generation stops after emitting any of these (the token is kept).
  std::vector<int64_t> stop_token_ids;
  // Generation stops after emitting this token (the token is kept, as the
  // reference generate() returns it).
  std::optional<int64_t> eos_token_id;
  // Generation stops when its text contains any of these (the text up to
  // and including it is kept). Needs a tokenizer.
  std::vector<std::string> stop_strings;

  // Defaults with temperature 0: deterministic argmax decoding.
  static SamplingParams Greedy();
};

// Checks p against a model with vocab_size tokens. Returns InvalidArgument,
// with a message naming the field and the offending value, when:
//   vocab_size < 1; temperature < 0 or not finite; top_k < 0 or > vocab_size;
//   filter_thres outside [0, 1) or giving k = int((1 - thres) * vocab) < 1;
//   top_p outside (0, 1]; repetition_penalty <= 0 or not finite;
//   max_new_tokens < 1; any stop_token_ids / eos_token_id outside [0, vocab);
//   an empty stop string.
// OK otherwise. Checked up front so that a bad request fails before any model
// work is done, instead of producing silently clamped behaviour.
absl::Status ValidateSamplingParams(const SamplingParams& p, int64_t vocab_size);

// What one request may set; every unset field takes the model's default.
struct SamplingOverrides {
  std::optional<int64_t> max_new_tokens;
  std::optional<float> temperature;
  std::optional<int64_t> top_k;
  std::optional<float> top_p;
  std::optional<float> repetition_penalty;
  std::optional<uint64_t> seed;
  std::vector<int64_t> stop_token_ids;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;  // drop the model's eos_token_id
};

// The one merge of a model's defaults with a request's overrides. An unset
// max_new_tokens takes min(defaults.max_new_tokens, max_new_tokens_cap),
// at least 1: the cap is what fits after the prompt and under the server's
// limit, so a default never makes a request invalid (an explicit value that
// does not fit is refused by validation). Nothing is validated here.
SamplingParams ResolveSamplingParams(const SamplingParams& defaults,
                                     const SamplingOverrides& request, int64_t max_new_tokens_cap);

// k of the reference's top_k(logits, thres): int((1 - thres) * vocab), in
// double arithmetic on the float thres (e.g. vocab 100, thres 0.9f -> 10;
// Python with the double 0.9 would get 9 at such exact multiples). Shared by
// validation and the sampler so both agree on k.
int64_t FilterThresToTopK(double filter_thres, int64_t vocab_size);

}  // namespace performer::generation
