// What the engine needs to run one generation, after the RPC layer has
// turned the wire request into tokens, and the one validation of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/generation/finish_reason.h"
#include "core/generation/sampling_params.h"

namespace performer::server {

using generation::FinishReason;
using generation::FinishReasonName;

struct GenerationRequest {
  // Unique among the live requests of its owner: each caller has its own
  // namespace of ids, so one caller can neither collide with nor cancel
  // another's request by naming its id.
  std::string request_id;
  // The caller that submitted it (its token's name); "" when the server
  // authenticates no one.
  std::string owner;
  // Continues this session (engine.h); empty = none. At most
  // kMaxSessionIdBytes bytes.
  std::string session_id;
  std::vector<int64_t> prompt;  // decoder prompt, non-empty
  std::vector<int64_t> source;  // encoder input (encoder-decoder models only)
  // Sampling, max_new_tokens, stop tokens and strings, eos: the model's
  // defaults merged with the request's overrides (ResolveSamplingParams).
  generation::SamplingParams sampling;
  bool return_logprobs = false;
  int32_t priority = 0;  // higher is admitted first; FIFO among equals
  absl::Time deadline = absl::InfiniteFuture();
  // Tokens the reader may fall behind before the request is ended with
  // RESOURCE_EXHAUSTED (slow reader); 0 = unbounded (unary calls).
  int64_t max_buffered_tokens = 0;
};

inline constexpr size_t kMaxSessionIdBytes = 128;

// What a request is checked against: the model and the server's limits.
struct RequestLimits {
  std::string model_name;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  bool needs_source = false;  // encoder-decoder
  int64_t source_vocab_size = 0;
  int64_t max_source_len = 0;
  bool has_tokenizer = false;     // stop strings need text
  int64_t max_new_tokens = 4096;  // the server's cap on a request's max_new_tokens
};

// The one validation of a generation request: INVALID_ARGUMENT with a
// message naming the field (prompt_tokens, source_tokens, max_new_tokens,
// temperature, top_k, top_p, repetition_penalty, stop_token_ids,
// stop_strings, eos_token_id, session_id) and the offending value; OK
// otherwise. A session's history is checked by the engine, which knows it.
absl::Status ValidateGenerationRequest(const GenerationRequest& request,
                                       const RequestLimits& limits);

}  // namespace performer::server
