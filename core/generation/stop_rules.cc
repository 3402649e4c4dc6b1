#include "core/generation/stop_rules.h"

#include <algorithm>
#include <utility>

namespace performer::generation {

FinishReason CheckStop(const SamplingParams& p, const StopTokenSet& stop_tokens, int64_t token,
                       int64_t generated_count, int64_t sequence_length, int64_t max_seq_len) {
  if (p.eos_token_id.has_value() && token == *p.eos_token_id) return FinishReason::kEos;
  if (stop_tokens.Contains(token)) return FinishReason::kStopToken;
  if (generated_count >= p.max_new_tokens) return FinishReason::kLength;
  if (max_seq_len > 0 && sequence_length >= max_seq_len) return FinishReason::kLength;
  return FinishReason::kNone;
}

StopTokenSet::StopTokenSet(const std::vector<int64_t>& ids) {
  for (const int64_t id : ids) {
    if (id < 0) continue;
    const size_t word = static_cast<size_t>(id) / 64;
    if (word >= words_.size()) words_.resize(word + 1, 0);
    words_[word] |= uint64_t{1} << (id % 64);
  }
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  for (const std::string& s : stop_strings_) longest_ = std::max(longest_, s.size());
}

StopStringMatcher::Match StopStringMatcher::Scan(std::string_view text) {
  Match match;
  if (stop_strings_.empty()) {
    match.releasable = text.size();
    return match;
  }
  // A stop string that ends in the new text starts at most longest_ - 1
  // bytes before it.
  const size_t from = searched_ >= longest_ ? searched_ - longest_ + 1 : 0;
  size_t stop_end = std::string_view::npos;
  for (const std::string& s : stop_strings_) {
    const size_t at = text.find(s, from);
    if (at != std::string_view::npos) stop_end = std::min(stop_end, at + s.size());
  }
  searched_ = text.size();
  if (stop_end != std::string_view::npos) {
    match.stopped = true;
    match.releasable = stop_end;
    return match;
  }
  size_t hold = 0;
  for (const std::string& s : stop_strings_) {
    for (size_t n = std::min(text.size(), s.size() - 1); n > hold; --n) {
      if (text.substr(text.size() - n) == std::string_view(s).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  match.releasable = text.size() - hold;
  return match;
}

}  // namespace performer::generation
