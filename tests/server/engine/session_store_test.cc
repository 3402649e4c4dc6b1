// Sessions' bookkeeping: one request at a time, what a turn leaves, the TTL,
// the memory budget with and without a spill folder, hand-off through the
// folder, and export / import.
#include "server/engine/session_store.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/testing/remove_tree.h"

namespace performer::server {
namespace {

SessionState Content(int64_t position, int64_t floats = 4) {
  auto state = std::make_shared<StateSnapshot>();
  state->position = position;
  state->layers = {{torch::full({floats}, static_cast<float>(position))}};
  SessionState content;
  content.state = std::move(state);
  for (int64_t i = 0; i <= position; ++i) content.tokens.push_back(i % 7);
  return content;
}

// The store's figures once the sessions idle past the TTL at `now` are gone.
SessionStats StatsAt(SessionStore& store, absl::Time now) {
  store.Expire(now);
  return store.Stats();
}

SessionOptions Options(int64_t max_bytes = 1 << 20, std::string spill_dir = "") {
  SessionOptions o;
  o.max_bytes = max_bytes;
  o.ttl = absl::Minutes(5);
  o.spill_dir = std::move(spill_dir);
  o.fingerprint = {"lm", "c", "w"};
  return o;
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/session_store_test.XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { testing::RemoveTree(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

const absl::Time kStart = absl::FromUnixSeconds(1700000000);

TEST(SessionStoreTest, ATurnLeavesItsStateForTheNext) {
  SessionStore store(Options());
  absl::StatusOr<SessionState> first = store.Begin("s", kStart, true);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->state, nullptr);  // a new session
  EXPECT_EQ(store.Begin("s", kStart, false).status().code(), absl::StatusCode::kFailedPrecondition);
  store.End("s", Content(5), kStart);
  absl::StatusOr<SessionState> second = store.Begin("s", kStart, false);
  ASSERT_TRUE(second.ok());
  ASSERT_NE(second->state, nullptr);
  EXPECT_EQ(second->state->position, 5);
  EXPECT_EQ(second->tokens.size(), 6u);
  // A failed turn keeps what the session had.
  store.End("s", std::nullopt, kStart);
  EXPECT_EQ(store.Begin("s", kStart, false)->state->position, 5);
  store.End("s", std::nullopt, kStart);
  EXPECT_EQ(StatsAt(store, kStart).sessions, 1);
  // A new session whose first turn failed is forgotten.
  ASSERT_TRUE(store.Begin("t", kStart, true).ok());
  store.End("t", std::nullopt, kStart);
  EXPECT_EQ(StatsAt(store, kStart).sessions, 1);
  // ... and a turn of it is NOT_FOUND, never a fresh session.
  EXPECT_EQ(store.Begin("t", kStart, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatsAt(store, kStart).misses_not_held, 1);
}

TEST(SessionStoreTest, CreatingAHeldSessionIsRefused) {
  SessionStore store(Options());
  ASSERT_TRUE(store.Begin("s", kStart, true).ok());
  EXPECT_EQ(store.Begin("s", kStart, true).status().code(), absl::StatusCode::kAlreadyExists);
  store.End("s", Content(2), kStart);
  EXPECT_EQ(store.Begin("s", kStart, true).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(store.Holds("s"));
  EXPECT_FALSE(store.Holds("t"));
}

// Take hands a session out once: ABORTED while a turn of it runs (the
// taker retries), then its bytes, then NOT_FOUND.
TEST(SessionStoreTest, TakeMovesASessionOutOnce) {
  SessionStore store(Options());
  ASSERT_TRUE(store.Begin("s", kStart, true).ok());
  store.End("s", Content(3), kStart);
  ASSERT_TRUE(store.Begin("s", kStart, false).ok());
  EXPECT_EQ(store.Take("s", kStart).status().code(), absl::StatusCode::kAborted);
  store.End("s", std::nullopt, kStart);
  absl::StatusOr<ExportedSession> taken = store.Take("s", kStart);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(taken->position, 3);
  EXPECT_EQ(store.Take("s", kStart).status().code(), absl::StatusCode::kNotFound);
  const SessionStats stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.moved_out, 1);
  EXPECT_EQ(stats.sessions, 0);
  EXPECT_EQ(stats.bytes, 0);
}

TEST(SessionStoreTest, DeleteExportAndImport) {
  SessionStore store(Options());
  EXPECT_EQ(store.Delete("s").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Export("s", kStart).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(store.Begin("s", kStart, true).ok());
  store.End("s", Content(3), kStart);
  absl::StatusOr<ExportedSession> exported = store.Export("s", kStart);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->position, 3);
  EXPECT_EQ(exported->tokens, 4);
  ASSERT_TRUE(store.Begin("s", kStart, false).ok());
  EXPECT_EQ(store.Delete("s").code(), absl::StatusCode::kFailedPrecondition);  // running
  EXPECT_EQ(store.Import("s", Content(1), kStart).code(), absl::StatusCode::kFailedPrecondition);
  store.End("s", std::nullopt, kStart);
  ASSERT_TRUE(store.Delete("s").ok());
  EXPECT_EQ(StatsAt(store, kStart).sessions, 0);
  // Imported under another id, it is the exported session.
  absl::StatusOr<decoding::EncodedState> decoded =
      decoding::DecodeState(exported->data, Options().fingerprint, 1 << 20);
  ASSERT_TRUE(decoded.ok());
  SessionState content{std::make_shared<StateSnapshot>(decoded->snapshot), decoded->tokens};
  ASSERT_TRUE(store.Import("u", content, kStart).ok());
  absl::StatusOr<SessionState> back = store.Begin("u", kStart, false);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->state->position, 3);
  EXPECT_TRUE(torch::equal(back->state->layers[0][0], torch::full({4}, 3.0f)));
}

TEST(SessionStoreTest, IdleSessionsExpireAndAnswerNotFound) {
  SessionStore store(Options());
  ASSERT_TRUE(store.Begin("s", kStart, true).ok());
  store.End("s", Content(2), kStart);
  EXPECT_EQ(StatsAt(store, kStart + absl::Minutes(4)).sessions, 1);
  const absl::Time later = kStart + absl::Minutes(6);
  const absl::Status expired = store.Begin("s", later, false).status();
  EXPECT_EQ(expired.code(), absl::StatusCode::kNotFound) << expired;
  EXPECT_EQ(StatsAt(store, later).sessions, 0);
  EXPECT_EQ(StatsAt(store, later).expired, 1);
  // Importing the id again revives it.
  ASSERT_TRUE(store.Import("s", Content(1), later).ok());
  EXPECT_TRUE(store.Begin("s", later, false).ok());
}

TEST(SessionStoreTest, WithoutASpillFolderTheBudgetDropsTheLeastRecentlyUsed) {
  const int64_t one = Content(2).bytes();
  SessionStore store(Options(2 * one));
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(store.Begin(id, kStart, true).ok());
    store.End(id, Content(2), kStart);
  }
  const SessionStats stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.sessions, 2);
  EXPECT_EQ(stats.evicted, 1);
  EXPECT_EQ(store.Begin("a", kStart, false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store.Begin("c", kStart, false).ok());
}

TEST(SessionStoreTest, PastTheBudgetSessionsSpillAndComeBack) {
  TempDir dir;
  // One byte short of the three sessions below.
  const int64_t all = Content(2).bytes() + Content(3).bytes() + Content(4).bytes();
  SessionStore store(Options(all - 1, dir.path()));
  for (int i = 0; i < 3; ++i) {
    const std::string id = "session-" + std::to_string(i);
    ASSERT_TRUE(store.Begin(id, kStart, true).ok());
    store.End(id, Content(2 + i), kStart);
  }
  SessionStats stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.sessions, 2);
  EXPECT_EQ(stats.spilled_sessions, 1);
  EXPECT_GT(stats.spilled_bytes, 0);
  EXPECT_EQ(stats.evicted, 0);
  // The spilled one comes back with its content.
  absl::StatusOr<SessionState> back = store.Begin("session-0", kStart, false);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state->position, 2);
  store.End("session-0", std::nullopt, kStart);
}

TEST(SessionStoreTest, SpillAllHandsSessionsToTheNextProcess) {
  TempDir dir;
  {
    SessionStore store(Options(1 << 20, dir.path()));
    ASSERT_TRUE(store.Begin("kept", kStart, true).ok());
    store.End("kept", Content(4), kStart);
    ASSERT_TRUE(store.SpillAll().ok());
    EXPECT_EQ(StatsAt(store, kStart).sessions, 0);
  }
  const absl::Time now = absl::Now();
  SessionStore next(Options(1 << 20, dir.path()));
  EXPECT_EQ(StatsAt(next, now).spilled_sessions, 1);
  absl::StatusOr<SessionState> back = next.Begin("kept", now, false);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state->position, 4);
  EXPECT_EQ(StatsAt(next, now).spilled_sessions, 0);  // taken out of the folder
  // Another model's store does not take it.
  next.End("kept", std::nullopt, now);
  ASSERT_TRUE(next.SpillAll().ok());
  SessionOptions other = Options(1 << 20, dir.path());
  other.fingerprint.weights_hash = "other";
  SessionStore wrong(other);
  EXPECT_EQ(wrong.Begin("kept", now, false).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A spilled session's file is named by a digest of its key: the longest ids
// (an owner's name, "/", 128 bytes) fit a file name and come back.
TEST(SessionStoreTest, TheLongestIdsSpillAndComeBack) {
  TempDir dir;
  const std::string id = std::string(64, 'o') + "/" + std::string(128, '\xff');
  {
    SessionStore store(Options(1 << 20, dir.path()));
    ASSERT_TRUE(store.Begin(id, kStart, true).ok());
    store.End(id, Content(3), kStart);
    ASSERT_TRUE(store.SpillAll().ok());
    EXPECT_EQ(StatsAt(store, kStart).spilled_sessions, 1);
  }
  const absl::Time now = absl::Now();
  SessionStore next(Options(1 << 20, dir.path()));
  EXPECT_EQ(StatsAt(next, now).spilled_sessions, 1);
  absl::StatusOr<SessionState> back = next.Begin(id, now, false);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state->position, 3);
}

}  // namespace
}  // namespace performer::server
