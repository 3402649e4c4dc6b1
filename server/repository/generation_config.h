// A model folder's generation defaults (generation_config.json, optional):
//   {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
//    "decoder_start_token_id": 1, "max_new_tokens": 64,
//    "temperature": 0.8, "top_k": 0, "top_p": 0.95, "repetition_penalty": 1.0}
// Every key is optional; unknown keys are an error (a typo would otherwise
// silently change behaviour). Absent file: no eos, greedy, max_new_tokens 16.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/generation/sampling_params.h"

namespace performer::server {

struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> eos_token_id;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> decoder_start_token_id;  // encoder-decoder prompt default
  int64_t max_new_tokens = 16;
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  float repetition_penalty = 1.0f;

  // The model's sampling defaults (temperature, top_k, top_p,
  // repetition_penalty, max_new_tokens, eos_token_id), which a request's
  // overrides are merged into (generation::ResolveSamplingParams).
  generation::SamplingParams SamplingDefaults() const;
};

// Reads <model_dir>/generation_config.json; defaults when absent.
// INVALID_ARGUMENT naming the file and key for a bad value (numbers must be
// finite as a float), or when the file is not a regular file of at most
// 16 MiB (core/io/bounded_file.h).
absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& model_dir);

// What depends on the model: every token id (bos, eos, pad,
// decoder_start) inside [0, vocab_size) and top_k at most vocab_size.
// INVALID_ARGUMENT naming generation_config.json under `model_dir`, the key
// and the vocabulary size otherwise: the server refuses such a folder at load
// instead of serving a model whose every request fails.
absl::Status ValidateGenerationConfig(const GenerationConfig& config, int64_t vocab_size,
                                      const std::string& model_dir);

}  // namespace performer::server
