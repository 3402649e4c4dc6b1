// When to stop generating a sequence, and why.
//
// The reference generate() stops on the eos token (which it returns as part
// of the output) or after seq_len steps. The server adds explicit stop tokens
// and a hard stop at the model's max_seq_len. In every case the token that
// triggered the stop is part of the output.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/generation/sampling_params.h"

namespace performer::generation {

enum class FinishReason {
  kNone,               // Keep generating.
  kEos,                // Emitted params.eos_token_id.
  kStopToken,          // Emitted one of params.stop_token_ids.
  kMaxNewTokens,       // Generated params.max_new_tokens tokens.
  kMaxSequenceLength,  // The sequence (prompt + generated) reached max_seq_len.
};

// Stable wire names: "none", "eos", "stop_token", "length", "max_seq_len".
// Used in responses and metrics, so they must not change.
std::string_view FinishReasonName(FinishReason reason);

// Decides, after `token` was generated, whether the sequence is finished.
//   generated_count: tokens generated so far, including `token`.
//   sequence_length: tokens in the sequence, prompt included, including
//     `token`.
//   max_seq_len: the model's maximum sequence length; <= 0 = no limit.
// Precedence when several apply: eos > stop token > max_new_tokens >
// max_seq_len, so the most specific reason is reported (an eos emitted as the
// last allowed token is still "eos"). Returns kNone to continue.
FinishReason CheckStop(const SamplingParams& p, int64_t token, int64_t generated_count,
                       int64_t sequence_length, int64_t max_seq_len);

}  // namespace performer::generation
