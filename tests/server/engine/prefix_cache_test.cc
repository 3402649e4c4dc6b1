// The prefix-state cache's rules: which prefixes a prompt may resume from
// (its own end, with logits; interval boundaries that leave a token to
// feed), what it wants kept, LRU under the byte budget, and its counters.
#include "server/engine/prefix_cache.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <vector>

namespace performer::server {
namespace {

// A state of `floats` float32 values at `position`.
StateSnapshot State(int64_t position, int64_t floats = 4) {
  StateSnapshot s;
  s.position = position;
  s.layers = {{torch::full({floats}, static_cast<float>(position))}};
  return s;
}

std::vector<int64_t> Tokens(int64_t n, int64_t salt = 0) {
  std::vector<int64_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back((i * 7 + salt) % 50);
  return t;
}

TEST(PrefixCacheTest, OffCachesNothing) {
  PrefixStateCache cache({0, 4});
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(cache.Wants(Tokens(8), 8));
  cache.Insert(Tokens(8), 8, State(8), torch::zeros({3}));
  EXPECT_FALSE(cache.Lookup(Tokens(8)).has_value());
  EXPECT_EQ(cache.Stats().queries, 0);
}

TEST(PrefixCacheTest, ScopesSeeOnlyTheirOwnEntries) {
  PrefixStateCache cache({1 << 20, 4});
  const std::vector<int64_t> prompt = Tokens(10);
  cache.Insert(prompt, 4, State(4), torch::Tensor(), "alice");
  cache.Insert(prompt, 10, State(10), torch::ones({3}), "alice");
  EXPECT_FALSE(cache.Lookup(prompt, "bob").has_value());
  EXPECT_FALSE(cache.Lookup(prompt).has_value());  // the shared scope ""
  EXPECT_TRUE(cache.Wants(prompt, 4, "bob"));
  EXPECT_FALSE(cache.Wants(prompt, 4, "alice"));
  std::optional<PrefixHit> hit = cache.Lookup(prompt, "alice");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 10u);
  // Both scopes may hold the same prefix.
  cache.Insert(prompt, 4, State(4), torch::Tensor(), "bob");
  hit = cache.Lookup(prompt, "bob");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 4u);
  EXPECT_EQ(cache.Stats().entries, 3);
}

TEST(PrefixCacheTest, WantsIntervalBoundariesAndPromptEnds) {
  PrefixStateCache cache({1 << 20, 4});
  const std::vector<int64_t> prompt = Tokens(10);
  EXPECT_TRUE(cache.Wants(prompt, 4));
  EXPECT_TRUE(cache.Wants(prompt, 8));
  EXPECT_TRUE(cache.Wants(prompt, 10));  // the end
  EXPECT_FALSE(cache.Wants(prompt, 6));
  EXPECT_FALSE(cache.Wants(prompt, 0));
  EXPECT_FALSE(cache.Wants(prompt, 11));
  cache.Insert(prompt, 4, State(4), torch::Tensor());
  EXPECT_FALSE(cache.Wants(prompt, 4));
  // An interval entry at the end of another prompt still wants its logits.
  const std::vector<int64_t> short_prompt(prompt.begin(), prompt.begin() + 4);
  EXPECT_TRUE(cache.Wants(short_prompt, 4));
  cache.Insert(short_prompt, 4, State(4), torch::ones({3}));
  EXPECT_FALSE(cache.Wants(short_prompt, 4));
  EXPECT_EQ(cache.Stats().entries, 1);
}

TEST(PrefixCacheTest, APromptResumesFromTheLongestCachedPrefixAtAnyToken) {
  PrefixStateCache cache({1 << 20, 4});
  const std::vector<int64_t> prompt = Tokens(10);
  for (size_t length : {4u, 8u}) cache.Insert(prompt, length, State(length), torch::Tensor());
  // The logits come as a row of a batch's output: the cache keeps a copy of
  // the row alone.
  torch::Tensor batch_logits = torch::full({2, 3}, 7.0f);
  cache.Insert(prompt, 10, State(10), batch_logits[1]);
  batch_logits.fill_(0.0f);

  // The same prompt: its end, with the logits.
  std::optional<PrefixHit> same = cache.Lookup(prompt);
  ASSERT_TRUE(same.has_value());
  EXPECT_EQ(same->tokens, 10u);
  EXPECT_EQ(same->state->position, 10);
  ASSERT_TRUE(same->logits.defined());
  EXPECT_EQ(same->logits[0].item<float>(), 7.0f);
  EXPECT_EQ(same->logits.device(), batch_logits.device());
  EXPECT_EQ(same->logits.storage().nbytes(), 3 * sizeof(float));

  // A longer prompt: the other prompt's end (a token's state does not depend
  // on how its sequence was fed), without the logits, which are those after
  // token 10, not after the longer prompt.
  std::vector<int64_t> longer = prompt;
  longer.push_back(3);
  longer.push_back(4);
  std::optional<PrefixHit> extended = cache.Lookup(longer);
  ASSERT_TRUE(extended.has_value());
  EXPECT_EQ(extended->tokens, 10u);
  EXPECT_EQ(extended->state->position, 10);
  EXPECT_FALSE(extended->logits.defined());

  // Exactly 8 tokens: the interval entry at 8 has no logits and would leave
  // nothing to feed, so the prompt resumes at 4.
  std::optional<PrefixHit> eight =
      cache.Lookup(std::vector<int64_t>(prompt.begin(), prompt.begin() + 8));
  ASSERT_TRUE(eight.has_value());
  EXPECT_EQ(eight->tokens, 4u);

  // A different first token: nothing.
  std::vector<int64_t> other = prompt;
  other[0] += 1;
  EXPECT_FALSE(cache.Lookup(other).has_value());

  const PrefixCacheStats stats = cache.Stats();
  EXPECT_EQ(stats.queries, 4);
  EXPECT_EQ(stats.hits, 3);
  EXPECT_EQ(stats.cached_tokens, 10 + 10 + 4);
}

TEST(PrefixCacheTest, EvictsTheLeastRecentlyUsedUnderTheBudget) {
  // Each entry: 4 floats + position + its tokens (4 x 8 bytes) = 56 bytes.
  PrefixStateCache cache({3 * 56, 4});
  const std::vector<int64_t> a = Tokens(4, 1), b = Tokens(4, 2), c = Tokens(4, 3), d = Tokens(4, 4);
  for (const auto* p : {&a, &b, &c}) cache.Insert(*p, 4, State(4), torch::Tensor());
  EXPECT_EQ(cache.Stats().bytes, 3 * 56);
  // a is used, so b is the least recently used when d comes.
  std::vector<int64_t> a_longer = a;
  a_longer.push_back(1);
  ASSERT_TRUE(cache.Lookup(a_longer).has_value());
  cache.Insert(d, 4, State(4), torch::Tensor());
  const PrefixCacheStats stats = cache.Stats();
  EXPECT_EQ(stats.entries, 3);
  EXPECT_EQ(stats.evictions, 1);
  EXPECT_LE(stats.bytes, 3 * 56);
  auto resumes = [&](std::vector<int64_t> p) {
    p.push_back(1);
    return cache.Lookup(p).has_value();
  };
  EXPECT_TRUE(resumes(a));
  EXPECT_FALSE(resumes(b));
  EXPECT_TRUE(resumes(c));
  EXPECT_TRUE(resumes(d));
  // An entry larger than the whole budget is not kept (nothing evicted for it).
  cache.Insert(Tokens(8, 9), 8, State(8, 1000), torch::Tensor());
  EXPECT_EQ(cache.Stats().entries, 3);
}

TEST(PrefixCacheTest, ALookupFindsEveryLengthStillCachedAfterEvictions) {
  // Room for two entries of 6 tokens (4 floats + position + 6 x 8 bytes).
  PrefixStateCache cache({2 * 72, 1});
  const std::vector<int64_t> a = Tokens(6, 1), b = Tokens(6, 2), c = Tokens(6, 3);
  auto resumes_at = [&](std::vector<int64_t> p) -> size_t {
    p.push_back(1);
    std::optional<PrefixHit> hit = cache.Lookup(p);
    return hit.has_value() ? hit->tokens : 0;
  };
  cache.Insert(a, 6, State(6), torch::Tensor());
  cache.Insert(b, 6, State(6), torch::Tensor());
  cache.Insert(c, 6, State(6), torch::Tensor());  // evicts a; length 6 stays (b, c)
  EXPECT_EQ(resumes_at(a), 0u);
  EXPECT_EQ(resumes_at(b), 6u);
  EXPECT_EQ(resumes_at(c), 6u);
  // Shorter entries of c's prefix (40 and 48 bytes) evict b, then c's own:
  // no entry of length 6 is left, and one made afterwards is found again.
  cache.Insert(c, 2, State(2), torch::Tensor());
  cache.Insert(c, 3, State(3), torch::Tensor());
  EXPECT_EQ(cache.Stats().entries, 2);
  EXPECT_EQ(resumes_at(c), 3u);
  cache.Insert(Tokens(6, 4), 6, State(6), torch::Tensor());
  EXPECT_EQ(resumes_at(b), 0u);
  EXPECT_EQ(resumes_at(Tokens(6, 4)), 6u);
  EXPECT_EQ(resumes_at(c), 3u);
}

}  // namespace
}  // namespace performer::server
