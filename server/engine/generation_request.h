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
  // Continues this session (engine.h); empty = none (ValidateSessionId).
  // Scoped to the owner, as request ids are.
  std::string session_id;
  // The request starts session_id (SessionStore::Begin's `create`).
  bool create_session = false;
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

// What one request may carry, whatever the model: the server's bounds on
// user input (serve_main's flags). Every field of a request that the server
// stores, matches or echoes has one, so that no client can make it do work
// or send bytes out of proportion to the request it is serving.
struct RequestBounds {
  int64_t max_new_tokens = 4096;
  // request_id is echoed in every streamed message and in the logs.
  int64_t max_request_id_bytes = 128;
  // Stop strings are matched on the engine thread at every step of the
  // request: their count and each one's length are bounded.
  int64_t max_stop_strings = 16;
  int64_t max_stop_string_bytes = 256;
  // Stop token ids are compared with every generated token.
  int64_t max_stop_token_ids = 256;
  // prompt_text / source_text, checked before they are tokenized.
  int64_t max_prompt_bytes = int64_t{1} << 20;
};

// What a request is checked against: the model and the server's limits.
struct RequestLimits {
  std::string model_name;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;
  bool needs_source = false;  // encoder-decoder
  int64_t source_vocab_size = 0;
  int64_t max_source_len = 0;
  bool has_tokenizer = false;  // stop strings need text
  RequestBounds bounds;
};

// The one validation of a generation request: INVALID_ARGUMENT with a
// message naming the field (request_id, prompt_tokens, source_tokens,
// max_new_tokens, temperature, top_k, top_p, repetition_penalty,
// stop_token_ids, stop_strings, eos_token_id, session_id) and the offending
// value; OK otherwise. A session's history is checked by the engine, which
// knows it.
absl::Status ValidateGenerationRequest(const GenerationRequest& request,
                                       const RequestLimits& limits);

// A session id as every session call takes it: 1..kMaxSessionIdBytes bytes;
// INVALID_ARGUMENT naming session_id otherwise.
absl::Status ValidateSessionId(const std::string& session_id);

// A request id named by a client (Cancel, a request's own, a KServe
// request's `id`): at most `max_bytes`; INVALID_ARGUMENT naming `field`
// otherwise.
absl::Status ValidateRequestId(const std::string& request_id, int64_t max_bytes,
                               const char* field = "request_id");

// prompt_text / source_text before it is tokenized: at most
// bounds.max_prompt_bytes; INVALID_ARGUMENT naming `field` otherwise.
absl::Status ValidatePromptText(const std::string& text, const char* field,
                                const RequestBounds& bounds);

}  // namespace performer::server
