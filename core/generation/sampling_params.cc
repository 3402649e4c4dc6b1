#include "core/generation/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace performer::generation {

SamplingParams SamplingParams::Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

SamplingParams ResolveSamplingParams(const SamplingParams& defaults,
                                     const SamplingOverrides& request, int64_t max_new_tokens_cap) {
  SamplingParams p = defaults;
  p.max_new_tokens =
      request.max_new_tokens.has_value()
          ? *request.max_new_tokens
          : std::max<int64_t>(1, std::min(defaults.max_new_tokens, max_new_tokens_cap));
  if (request.temperature.has_value()) p.temperature = *request.temperature;
  if (request.top_k.has_value()) p.top_k = *request.top_k;
  if (request.top_p.has_value()) p.top_p = *request.top_p;
  if (request.repetition_penalty.has_value()) p.repetition_penalty = *request.repetition_penalty;
  if (request.seed.has_value()) p.seed = request.seed;
  p.stop_token_ids = request.stop_token_ids;
  p.stop_strings = request.stop_strings;
  if (request.ignore_eos) p.eos_token_id.reset();
  return p;
}

int64_t FilterThresToTopK(double filter_thres, int64_t vocab_size) {
  const double k = (1.0 - filter_thres) * static_cast<double>(vocab_size);
  // k <= vocab_size for thres in [0, 1), but a vocabulary near 2^63 rounds
  // up as a double, past what int64 holds: clamp before converting.
  if (k >= static_cast<double>(vocab_size)) return vocab_size;
  // int() in Python truncates toward zero.
  return static_cast<int64_t>(std::trunc(k));
}

absl::Status ValidateSamplingParams(const SamplingParams& p, int64_t vocab_size) {
  if (vocab_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("vocab_size must be >= 1, got ", vocab_size));
  }
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be finite and >= 0, got ", p.temperature));
  }
  if (p.top_k < 0 || p.top_k > vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be in [0, ", vocab_size, "] (0 = off), got ", p.top_k));
  }
  if (p.filter_thres.has_value()) {
    const double thres = *p.filter_thres;
    if (!(thres >= 0.0 && thres < 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter_thres must be in [0, 1), got ", thres));
    }
    const int64_t k = FilterThresToTopK(thres, vocab_size);
    if (k < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("filter_thres ", thres, " keeps k = int((1 - filter_thres) * ", vocab_size,
                       ") = ", k, " tokens; k must be >= 1"));
    }
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1] (1 = off), got ", p.top_p));
  }
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        "repetition_penalty must be finite and > 0 (1 = off), got ", p.repetition_penalty));
  }
  if (p.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1, got ", p.max_new_tokens));
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    const int64_t id = p.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop_token_ids[", i, "] must be in [0, ", vocab_size, "), got ", id));
    }
  }
  for (size_t i = 0; i < p.stop_strings.size(); ++i) {
    if (p.stop_strings[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop_strings[", i, "] is empty"));
    }
  }
  if (p.eos_token_id.has_value() && (*p.eos_token_id < 0 || *p.eos_token_id >= vocab_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_token_id must be in [0, ", vocab_size, "), got ", *p.eos_token_id));
  }
  return absl::OkStatus();
}

}  // namespace performer::generation
