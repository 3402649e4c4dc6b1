// Sessions' bookkeeping: one request at a time, what a turn leaves, the TTL,
// the memory budget with and without a spill folder, hand-off through the
// folder, export / import, and each caller's share of the memory.
#include "server/engine/session_store.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

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

// The store's key of `owner`'s session `id`, as the engine makes it.
std::string Key(const std::string& owner, const std::string& id) { return owner + "/" + id; }

// A new session of `owner` whose first turn leaves `content`.
void Create(SessionStore& store, const std::string& owner, const std::string& id,
            SessionState content = Content(2)) {
  ASSERT_TRUE(store.Begin(Key(owner, id), kStart, true, owner).ok()) << owner << " " << id;
  store.End(Key(owner, id), std::move(content), kStart);
}

// Whether a turn of `owner`'s session `id` begins (it then ends, keeping
// its content).
bool Continues(SessionStore& store, const std::string& owner, const std::string& id) {
  const bool held = store.Begin(Key(owner, id), kStart, false, owner).ok();
  if (held) store.End(Key(owner, id), std::nullopt, kStart);
  return held;
}

// One caller filling its share makes room from its own least recently
// used sessions: bob's, the least recently used of all, stays.
TEST(SessionStoreTest, ACallerPastItsShareEvictsOnlyItsOwnSessions) {
  const int64_t one = Content(2).bytes();
  SessionOptions options = Options(10 * one);
  options.max_bytes_per_caller = 2 * one;
  SessionStore store(options);
  Create(store, "bob", "1");
  for (const char* id : {"1", "2", "3"}) Create(store, "alice", id);
  const SessionStats stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.sessions, 3);
  EXPECT_EQ(stats.evicted, 1);
  EXPECT_TRUE(Continues(store, "bob", "1"));
  EXPECT_EQ(store.Begin(Key("alice", "1"), kStart, false, "alice").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(Continues(store, "alice", "2"));
  EXPECT_TRUE(Continues(store, "alice", "3"));
  // An import of alice's makes room the same way: her least recently used
  // session ("2") goes, bob's stays.
  ASSERT_TRUE(store.Import(Key("alice", "4"), Content(2), kStart, false, "alice").ok());
  EXPECT_FALSE(Continues(store, "alice", "2"));
  EXPECT_TRUE(Continues(store, "alice", "3"));
  EXPECT_TRUE(Continues(store, "bob", "1"));
}

// With a spill folder a caller's own sessions spill, and one coming back
// makes room from that caller's sessions again.
TEST(SessionStoreTest, ACallersSessionsPastItsShareSpillAndComeBackWithinIt) {
  TempDir dir;
  const int64_t one = Content(2).bytes();
  SessionOptions options = Options(10 * one, dir.path());
  options.max_bytes_per_caller = 2 * one;
  SessionStore store(options);
  Create(store, "bob", "1");
  for (const char* id : {"1", "2", "3"}) Create(store, "alice", id);
  SessionStats stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.sessions, 3);
  EXPECT_EQ(stats.spilled_sessions, 1);
  EXPECT_EQ(stats.evicted, 0);
  absl::StatusOr<SessionState> back = store.Begin(Key("alice", "1"), kStart, false, "alice");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state->position, 2);
  store.End(Key("alice", "1"), std::nullopt, kStart);
  stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.sessions, 3);          // bob's, alice's "3" and "1"
  EXPECT_EQ(stats.spilled_sessions, 1);  // alice's "2"
  EXPECT_TRUE(Continues(store, "bob", "1"));
}

// A session that cannot fit its caller's share, whatever that caller
// evicts, is refused with RESOURCE_EXHAUSTED naming the share; at a turn's
// end, which cannot be refused, it leaves memory.
TEST(SessionStoreTest, ASessionLargerThanItsCallersShareIsRefused) {
  const int64_t one = Content(2).bytes();
  SessionOptions options = Options(10 * one);
  options.max_bytes_per_caller = one - 1;
  SessionStore store(options);
  const absl::Status imported =
      store.Import(Key("alice", "big"), Content(2), kStart, false, "alice");
  EXPECT_EQ(imported.code(), absl::StatusCode::kResourceExhausted) << imported;
  EXPECT_NE(imported.message().find("caller alice's share"), std::string::npos) << imported;
  EXPECT_NE(imported.message().find("--caller_session_share"), std::string::npos) << imported;
  EXPECT_EQ(StatsAt(store, kStart).sessions, 0);
  EXPECT_FALSE(store.Holds(Key("alice", "big")));
  // A turn that grows a new session past the share: it is dropped.
  ASSERT_TRUE(store.Begin(Key("alice", "grown"), kStart, true, "alice").ok());
  store.End(Key("alice", "grown"), Content(2), kStart);
  EXPECT_EQ(StatsAt(store, kStart).sessions, 0);
  EXPECT_EQ(StatsAt(store, kStart).evicted, 1);
  EXPECT_EQ(store.Begin(Key("alice", "grown"), kStart, false, "alice").status().code(),
            absl::StatusCode::kNotFound);
  // Knowing a new session's state bytes, the store refuses it at its creation.
  options.new_session_bytes = one;
  SessionStore knowing(options);
  const absl::Status created = knowing.Begin(Key("alice", "new"), kStart, true, "alice").status();
  EXPECT_EQ(created.code(), absl::StatusCode::kResourceExhausted) << created;
  EXPECT_EQ(StatsAt(knowing, kStart).sessions, 0);
  // A session of exactly the share fits.
  options.max_bytes_per_caller = one;
  SessionStore fits(options);
  EXPECT_TRUE(fits.Begin(Key("bob", "new"), kStart, true, "bob").ok());
}

// A caller whose sessions in memory all have a turn running cannot make
// room: RESOURCE_EXHAUSTED until they end, then its least recently used
// one goes.
TEST(SessionStoreTest, ACallerWhoseSessionsAreAllRunningIsRefusedUntilTheyEnd) {
  const int64_t one = Content(2).bytes();
  SessionOptions options = Options(10 * one);
  options.max_bytes_per_caller = 2 * one;
  SessionStore store(options);
  Create(store, "alice", "1");
  Create(store, "alice", "2");
  ASSERT_TRUE(store.Begin(Key("alice", "1"), kStart, false, "alice").ok());
  ASSERT_TRUE(store.Begin(Key("alice", "2"), kStart, false, "alice").ok());
  const absl::Status refused = store.Import(Key("alice", "3"), Content(2), kStart, false, "alice");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("--caller_session_share"), std::string::npos) << refused;
  EXPECT_FALSE(store.Holds(Key("alice", "3")));
  store.End(Key("alice", "1"), std::nullopt, kStart);
  store.End(Key("alice", "2"), std::nullopt, kStart);
  ASSERT_TRUE(store.Import(Key("alice", "3"), Content(2), kStart, false, "alice").ok());
  EXPECT_FALSE(store.Holds(Key("alice", "1")));
  EXPECT_TRUE(store.Holds(Key("alice", "2")));
  EXPECT_TRUE(store.Holds(Key("alice", "3")));
}

// A session moved in from a peer has no other copy: refused for the
// share, it is kept in the spill folder, and comes back once there is room.
TEST(SessionStoreTest, AMovedInSessionPastItsCallersShareWaitsInTheFolder) {
  TempDir dir;
  const int64_t one = Content(2).bytes();
  SessionOptions options = Options(10 * one, dir.path());
  options.max_bytes_per_caller = 2 * one;
  SessionStore store(options);
  Create(store, "alice", "1");
  ASSERT_TRUE(store.Begin(Key("alice", "1"), kStart, false, "alice").ok());
  const absl::Status moved =
      store.Import(Key("alice", "2"), Content(3), kStart, /*moved_in=*/true, "alice");
  EXPECT_EQ(moved.code(), absl::StatusCode::kResourceExhausted) << moved;
  EXPECT_TRUE(store.Holds(Key("alice", "2")));
  EXPECT_EQ(StatsAt(store, kStart).spilled_sessions, 1);
  // While alice's other turn runs, a turn of it is refused; it stays there.
  EXPECT_EQ(store.Begin(Key("alice", "2"), kStart, false, "alice").status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(StatsAt(store, kStart).spilled_sessions, 1);
  store.End(Key("alice", "1"), std::nullopt, kStart);
  absl::StatusOr<SessionState> back = store.Begin(Key("alice", "2"), kStart, false, "alice");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state->position, 3);
}

// The anonymous caller (a server without tokens) is every client at once:
// the budget alone bounds it.
TEST(SessionStoreTest, TheAnonymousCallerIsNotBoundedByTheShare) {
  const int64_t one = Content(2).bytes();
  SessionOptions options = Options(10 * one);
  options.max_bytes_per_caller = one;
  options.new_session_bytes = one;
  SessionStore store(options);
  for (const char* id : {"1", "2", "3"}) {
    ASSERT_TRUE(store.Begin(id, kStart, true, "").ok());
    store.End(id, Content(2), kStart);
  }
  ASSERT_TRUE(store.Import("4", Content(2), kStart, false, "").ok());
  const SessionStats stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.sessions, 4);
  EXPECT_EQ(stats.evicted, 0);
}

// No per-caller bound (a share of 1): the budget's least recently used
// session goes, whoever holds it, as without callers.
TEST(SessionStoreTest, WithoutACallerBoundTheBudgetAloneEvicts) {
  const int64_t one = Content(2).bytes();
  SessionOptions options = Options(3 * one);
  options.max_bytes_per_caller = 0;
  options.new_session_bytes = one;
  SessionStore store(options);
  Create(store, "bob", "1");
  for (const char* id : {"1", "2", "3"}) Create(store, "alice", id);
  const SessionStats stats = StatsAt(store, kStart);
  EXPECT_EQ(stats.sessions, 3);
  EXPECT_EQ(stats.evicted, 1);
  EXPECT_EQ(store.Begin(Key("bob", "1"), kStart, false, "bob").status().code(),
            absl::StatusCode::kNotFound);
  for (const char* id : {"1", "2", "3"}) EXPECT_TRUE(Continues(store, "alice", id)) << id;
}

}  // namespace
}  // namespace performer::server
