#include "core/generation/stop_rules.h"

#include <algorithm>

namespace performer::generation {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kStopToken:
      return "stop_token";
    case FinishReason::kMaxNewTokens:
      return "length";
    case FinishReason::kMaxSequenceLength:
      return "max_seq_len";
  }
  return "unknown";
}

FinishReason CheckStop(const SamplingParams& p, int64_t token, int64_t generated_count,
                       int64_t sequence_length, int64_t max_seq_len) {
  if (p.eos_token_id.has_value() && token == *p.eos_token_id) return FinishReason::kEos;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
      p.stop_token_ids.end()) {
    return FinishReason::kStopToken;
  }
  if (generated_count >= p.max_new_tokens) return FinishReason::kMaxNewTokens;
  if (max_seq_len > 0 && sequence_length >= max_seq_len) return FinishReason::kMaxSequenceLength;
  return FinishReason::kNone;
}

}  // namespace performer::generation
