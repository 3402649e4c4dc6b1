// The prefix-state cache: the recurrent state after a prompt prefix, kept
// so that a later prompt with the same prefix resumes from it instead of
// prefilling it again. A Performer sequence's whole past is one fixed-size
// state, so an entry costs the model's state bytes whatever its length.
//
// Entries, keyed by their exact token prefix:
//   * the end of every prompt, with the logits after its last token: a
//     later identical prompt needs no prefill at all;
//   * every `interval_tokens` inside a prompt (multiples of it);
//   * the end of a request's generation (its prompt and the tokens it fed),
//     without logits: the next turn of a conversation that resends its
//     history resumes after the reply.
// A lookup resumes from the longest cached prefix, at any token.
// Exactness: a resumed request gives the tokens a cold one gives, bit for
// bit, because a token's logits and the state after it do not depend on
// how its sequence was fed (prompt chunks of any size, steps, a restored
// state: docs/serving.md, the decoder's contract on the CPU).

// Scopes: every entry belongs to a scope (the engine's is the caller, when
// bearer tokens name callers), and a lookup sees only its own scope's
// entries, so that a hit cannot tell one caller what another sent. The
// scope "" is the one shared scope.
//
// LRU under a byte budget (states, logits and the keys' tokens); 0 turns the
// cache off. Thread-safe.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/decoding/sequence_decoder.h"  // StateSnapshot
#include "server/engine/state_reuse_options.h"

namespace performer::server {

// A cached state a prompt can resume from.
struct PrefixHit {
  size_t tokens = 0;  // prompt tokens it covers
  std::shared_ptr<const StateSnapshot> state;
  torch::Tensor logits;  // [vocab] when tokens == the whole prompt
};

class PrefixStateCache {
 public:
  explicit PrefixStateCache(PrefixCacheOptions options);
  PrefixStateCache(const PrefixStateCache&) = delete;
  PrefixStateCache& operator=(const PrefixStateCache&) = delete;

  bool enabled() const { return options_.max_bytes > 0; }

  // The longest usable cached prefix of `prompt` in `scope` (counted as a
  // query): the whole prompt when its entry has logits, else the longest
  // shorter one.
  std::optional<PrefixHit> Lookup(const std::vector<int64_t>& prompt,
                                  const std::string& scope = "");

  // Whether the state after prompt[0, length) should be kept in `scope`: an
  // interval boundary or the prompt's end, not cached there yet.
  bool Wants(const std::vector<int64_t>& prompt, size_t length, const std::string& scope = "");
  // Keeps the state after prompt[0, length); `logits` [vocab] (the logits
  // after the last token) are kept when length is the whole prompt, as a
  // copy on their own device: a hit's logits are sampled with those of the
  // iteration's other prompts, which must share their device.
  // Evicts the least recently used entries to stay under the budget; an
  // entry larger than the whole budget is not kept.
  void Insert(const std::vector<int64_t>& prompt, size_t length, StateSnapshot state,
              const torch::Tensor& logits, const std::string& scope = "");

  PrefixCacheStats Stats() const;

 private:
  struct Entry {
    std::string scope;
    std::vector<int64_t> tokens;
    std::shared_ptr<const StateSnapshot> state;
    torch::Tensor logits;  // defined for a prompt's end
    int64_t bytes = 0;
  };
  using Lru = std::list<Entry>;

  // Hash of tokens[0, length) (the key; entries compare their tokens too).
  static uint64_t KeyOf(const std::string& scope, const std::vector<int64_t>& tokens,
                        size_t length);
  Lru::iterator FindLocked(const std::string& scope, const std::vector<int64_t>& prompt,
                           size_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same with the key of prompt[0, length) already computed.
  Lru::iterator FindLocked(const std::string& scope, const std::vector<int64_t>& prompt,
                           size_t length, uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(Lru::iterator entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PrefixCacheOptions options_;
  // The engine thread looks up and inserts; a metrics scrape reads Stats.
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  std::unordered_multimap<uint64_t, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  // Entries per key length, every scope together: a lookup probes only the
  // lengths some entry has, not every prefix of the prompt (a long prompt
  // would otherwise hold mu_, which the engine thread takes to insert, for a
  // hash probe per token).
  std::map<size_t, int64_t> lengths_ ABSL_GUARDED_BY(mu_);
  PrefixCacheStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace performer::server
