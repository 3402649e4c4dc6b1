#include "server/engine/prefix_cache.h"

#include <algorithm>
#include <iterator>
#include <string_view>
#include <utility>

#include "core/decoding/state_encoding.h"

namespace performer::server {

PrefixStateCache::PrefixStateCache(PrefixCacheOptions options) : options_(options) {}

uint64_t PrefixStateCache::KeyOf(const std::string& scope, const std::vector<int64_t>& tokens,
                                 size_t length) {
  return decoding::Fnv1a64(
      std::string_view(reinterpret_cast<const char*>(tokens.data()), length * sizeof(int64_t)),
      decoding::Fnv1a64(scope));
}

PrefixStateCache::Lru::iterator PrefixStateCache::FindLocked(const std::string& scope,
                                                             const std::vector<int64_t>& prompt,
                                                             size_t length) {
  return FindLocked(scope, prompt, length, KeyOf(scope, prompt, length));
}

PrefixStateCache::Lru::iterator PrefixStateCache::FindLocked(const std::string& scope,
                                                             const std::vector<int64_t>& prompt,
                                                             size_t length, uint64_t key) {
  auto [begin, end] = index_.equal_range(key);
  for (auto it = begin; it != end; ++it) {
    const std::vector<int64_t>& tokens = it->second->tokens;
    if (it->second->scope == scope && tokens.size() == length &&
        std::equal(tokens.begin(), tokens.end(), prompt.begin())) {
      return it->second;
    }
  }
  return lru_.end();
}

std::optional<PrefixHit> PrefixStateCache::Lookup(const std::vector<int64_t>& prompt,
                                                  const std::string& scope) {
  if (!enabled() || prompt.empty()) return std::nullopt;
  // The key of every prefix length, in one pass (the hash is incremental).
  std::vector<uint64_t> keys(prompt.size() + 1);
  keys[0] = decoding::Fnv1a64(scope);
  for (size_t i = 0; i < prompt.size(); ++i) {
    keys[i + 1] = decoding::Fnv1a64(
        std::string_view(reinterpret_cast<const char*>(&prompt[i]), sizeof(int64_t)), keys[i]);
  }
  absl::MutexLock lock(&mu_);
  ++stats_.queries;
  // The longest cached prefix, at any token: the whole prompt if its entry
  // has the logits after it, else any shorter entry, which leaves at least
  // one token to feed.
  for (auto present = lengths_.upper_bound(prompt.size()); present != lengths_.begin();) {
    const size_t length = (--present)->first;
    auto it = FindLocked(scope, prompt, length, keys[length]);
    if (it == lru_.end() || (length == prompt.size() && !it->logits.defined())) continue;
    lru_.splice(lru_.begin(), lru_, it);
    ++stats_.hits;
    stats_.cached_tokens += static_cast<int64_t>(length);
    return PrefixHit{length, it->state, length == prompt.size() ? it->logits : torch::Tensor()};
  }
  return std::nullopt;
}

bool PrefixStateCache::Wants(const std::vector<int64_t>& prompt, size_t length,
                             const std::string& scope) {
  if (!enabled() || length == 0 || length > prompt.size()) return false;
  const bool end = length == prompt.size();
  if (!end && length % static_cast<size_t>(options_.interval_tokens) != 0) return false;
  absl::MutexLock lock(&mu_);
  auto it = FindLocked(scope, prompt, length);
  // An interval entry at a prompt's end still wants the logits.
  return it == lru_.end() || (end && !it->logits.defined());
}

void PrefixStateCache::Insert(const std::vector<int64_t>& prompt, size_t length,
                              StateSnapshot state, const torch::Tensor& logits,
                              const std::string& scope) {
  if (!enabled() || length == 0 || length > prompt.size()) return;
  Entry entry;
  entry.scope = scope;
  entry.tokens.assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(length));
  if (length == prompt.size() && logits.defined()) {
    entry.logits = logits.detach().clone(at::MemoryFormat::Contiguous);
  }
  entry.bytes = state.bytes() + static_cast<int64_t>(length * sizeof(int64_t) + scope.size()) +
                (entry.logits.defined() ? entry.logits.numel() * entry.logits.element_size() : 0);
  entry.state = std::make_shared<const StateSnapshot>(std::move(state));
  if (entry.bytes > options_.max_bytes) return;
  const uint64_t key = KeyOf(scope, prompt, length);
  absl::MutexLock lock(&mu_);
  if (auto it = FindLocked(scope, prompt, length, key); it != lru_.end()) EraseLocked(it);
  stats_.bytes += entry.bytes;
  ++stats_.entries;
  lru_.push_front(std::move(entry));
  index_.emplace(key, lru_.begin());
  ++lengths_[length];
  EvictLocked();
}

void PrefixStateCache::EraseLocked(Lru::iterator entry) {
  auto [begin, end] = index_.equal_range(KeyOf(entry->scope, entry->tokens, entry->tokens.size()));
  for (auto i = begin; i != end; ++i) {
    if (i->second == entry) {
      index_.erase(i);
      break;
    }
  }
  if (auto present = lengths_.find(entry->tokens.size()); --present->second == 0) {
    lengths_.erase(present);
  }
  stats_.bytes -= entry->bytes;
  --stats_.entries;
  lru_.erase(entry);
}

void PrefixStateCache::EvictLocked() {
  while (stats_.bytes > options_.max_bytes && !lru_.empty()) {
    EraseLocked(std::prev(lru_.end()));
    ++stats_.evictions;
  }
}

PrefixCacheStats PrefixStateCache::Stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace performer::server
