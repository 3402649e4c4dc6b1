// When to stop generating a sequence, and why: token rules and stop strings
// in one place.
//
// Token rules (CheckStop): the eos token, explicit stop tokens,
// max_new_tokens and the model's max_seq_len. The token that triggers a
// stop is part of the output (the reference generate() returns its eos).
//
// Stop strings (StopStringMatcher): strings that end the generation when
// they appear in its text, possibly spanning token boundaries. Text that
// could still turn out to be the start of a stop string is held back until
// it cannot, so nothing past a stop string is ever released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/generation/finish_reason.h"
#include "core/generation/sampling_params.h"

namespace performer::generation {

// A request's stop_token_ids as a bitset over the ids: one test per
// generated token, however many stop tokens the request names (built once
// per request; the ids' count is bounded by the server, their order kept in
// the request for its error messages). Negative ids are never generated
// and are left out.
class StopTokenSet {
 public:
  explicit StopTokenSet(const std::vector<int64_t>& ids);
  bool Contains(int64_t token) const {
    const uint64_t t = static_cast<uint64_t>(token);
    return t / 64 < words_.size() && ((words_[t / 64] >> (t % 64)) & 1) != 0;
  }

 private:
  std::vector<uint64_t> words_;
};

// Decides, after `token` was generated, whether the sequence is finished.
//   stop_tokens: p.stop_token_ids as a StopTokenSet, built once per request.
//   generated_count: tokens generated so far, including `token`.
//   sequence_length: tokens in the sequence, prompt included, including
//     `token`.
//   max_seq_len: the model's maximum sequence length; <= 0 = no limit.
// Precedence when several apply: eos > stop token > length, so the most
// specific reason is reported (an eos emitted as the last allowed token is
// still kEos). Returns kNone to continue.
FinishReason CheckStop(const SamplingParams& p, const StopTokenSet& stop_tokens, int64_t token,
                       int64_t generated_count, int64_t sequence_length, int64_t max_seq_len);

// Finds stop strings in a text that only grows. Cost per call is
// proportional to the new text times the number of stop strings, never to
// the whole text.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  bool empty() const { return stop_strings_.empty(); }

  struct Match {
    bool stopped = false;  // a stop string ends within `text`
    // How much of `text` is final: up to and including the earliest-ending
    // stop string when stopped, else everything but the longest tail that is
    // a proper prefix of a stop string.
    size_t releasable = 0;
  };
  // `text` is the whole text so far; it must extend the previous call's.
  Match Scan(std::string_view text);

 private:
  std::vector<std::string> stop_strings_;
  size_t longest_ = 0;
  size_t searched_ = 0;  // text before this offset has no stop string ending in it
};

}  // namespace performer::generation
