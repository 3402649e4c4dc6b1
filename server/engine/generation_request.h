// What the engine needs to run one generation, after the RPC layer has
// turned the wire request into tokens, and how it ended.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "core/generation/sampling_params.h"

namespace performer::server {

// Why a generation ended (the wire enum performer.v1.FinishReason).
enum class FinishReason {
  kNone,        // still running
  kLength,      // max_new_tokens, or the model's max sequence length
  kEos,         // the model's eos token (included in the output)
  kStopToken,   // one of stop_token_ids (included)
  kStopString,  // one of stop_strings (the text up to and including it)
  kCancelled,   // Cancel RPC, client cancel or disconnect
  kDeadline,    // the RPC deadline passed
  kError,       // ended with a non-OK status (slow reader, shutdown, ...)
};

// Stable lower-case names ("length", "eos", ...), for logs and metrics.
std::string_view FinishReasonName(FinishReason reason);

struct GenerationRequest {
  std::string request_id;       // unique among the engine's live requests
  std::vector<int64_t> prompt;  // decoder prompt, non-empty
  std::vector<int64_t> source;  // encoder input (encoder-decoder models only)
  // Sampling, max_new_tokens, stop_token_ids and eos_token_id.
  generation::SamplingParams sampling;
  std::vector<std::string> stop_strings;  // need a tokenizer
  bool return_logprobs = false;
  int32_t priority = 0;  // higher is admitted first; FIFO among equals
  absl::Time deadline = absl::InfiniteFuture();
  // Tokens the reader may fall behind before the request is ended with
  // RESOURCE_EXHAUSTED (slow reader); 0 = unbounded (unary calls).
  int64_t max_buffered_tokens = 0;
};

}  // namespace performer::server
