// Why a generation ended: the one definition shared by the stop rules, the
// decoding loop, the serving engine, its metrics and logs (the wire enum
// performer.v1.FinishReason is its serialised form).
#pragma once

#include <string_view>

namespace performer::generation {

enum class FinishReason {
  kNone,        // still running
  kLength,      // max_new_tokens, or the model's max sequence length
  kEos,         // the model's eos token (included in the output)
  kStopToken,   // one of stop_token_ids (included)
  kStopString,  // one of stop_strings (the text up to and including it)
  kCancelled,   // Cancel RPC, client cancel or disconnect
  kDeadline,    // the request's deadline passed
  kError,       // ended with a non-OK status (slow reader, model error, shutdown, ...)
};

// Stable lower-case names ("none", "length", "eos", "stop_token",
// "stop_string", "cancelled", "deadline", "error"): metric labels and log
// fields, so they must not change.
std::string_view FinishReasonName(FinishReason reason);

}  // namespace performer::generation
