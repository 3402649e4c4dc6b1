// The engine reusing recurrent states, on the repository's default model
// (models/performer-fortunes: local heads, so the rings are part of every
// state): a prompt resumed from the prefix cache gives the tokens of a cold
// prefill bit for bit (repeated, extended, greedy and sampled); a session's
// turns give the tokens of one request with the whole history; an exported
// session imported elsewhere continues as the original; bad imports are
// refused and the engine serves on.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/decoding/performer_decoder.h"
#include "core/models/model_folder.h"
#include "server/engine/engine.h"
#include "tests/server/engine/stream_collector.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/remove_tree.h"

namespace performer::server {
namespace {

constexpr int64_t kChunk = 16;

class StateReuseTest : public ::testing::Test {
 protected:
  static std::unique_ptr<Engine> MakeEngine(EngineOptions options, int64_t capacity = 4,
                                            decoding::ModelFingerprint fingerprint = {
                                                "performer-fortunes", "config", "weights"}) {
    auto model = models::LoadModelFolder(testing::RepositoryModelsRoot() + "/performer-fortunes");
    EXPECT_TRUE(model.ok()) << model.status();
    auto decoder = decoding::PerformerDecoder::Create(*model, capacity);
    EXPECT_TRUE(decoder.ok()) << decoder.status();
    options.prefill_chunk_tokens = kChunk;
    options.prefix_cache.interval_tokens = kChunk;
    options.sessions.fingerprint = std::move(fingerprint);
    return std::make_unique<Engine>("performer-fortunes", std::move(*decoder), nullptr, options);
  }

  static EngineOptions CacheOn() {
    EngineOptions o;
    o.prefix_cache.max_bytes = 64 << 20;
    return o;
  }
  static EngineOptions CacheOff() {
    EngineOptions o;
    o.prefix_cache.max_bytes = 0;
    return o;
  }

  // The bytes of `text` as tokens (the model's byte tokenizer).
  static std::vector<int64_t> Bytes(const std::string& text) {
    return std::vector<int64_t>(text.begin(), text.end());
  }

  static std::vector<int64_t> LongPrompt(size_t length) {
    const std::string text =
        "Q: What is the difference between a duck? A: One of its legs is both the same. ";
    std::vector<int64_t> out;
    while (out.size() < length)
      out.push_back(static_cast<unsigned char>(text[out.size() % text.size()]));
    return out;
  }

  static GenerationRequest Request(std::string id, std::vector<int64_t> prompt, int64_t max_new,
                                   bool sampled = false) {
    GenerationRequest r;
    r.request_id = std::move(id);
    r.prompt = std::move(prompt);
    if (sampled) {
      r.sampling.temperature = 0.9f;
      r.sampling.top_k = 40;
      r.sampling.seed = 1234;
    } else {
      r.sampling = generation::SamplingParams::Greedy();
    }
    r.sampling.max_new_tokens = max_new;
    return r;
  }

  static std::vector<int64_t> Tokens(const Collected& c) {
    return std::vector<int64_t>(c.tokens.begin(), c.tokens.end());
  }
};

TEST_F(StateReuseTest, ARepeatedPromptResumesFromItsEndWithTheColdTokens) {
  std::unique_ptr<Engine> cold = MakeEngine(CacheOff());
  const std::vector<int64_t> prompt = LongPrompt(70);  // chunks end at 16, 32, 48, 64, 70
  // The states kept in host memory, and where the model runs.
  for (bool on_device : {false, true}) {
    SCOPED_TRACE(on_device ? "on the device" : "on the host");
    EngineOptions options = CacheOn();
    options.prefix_cache.on_device = on_device;
    std::unique_ptr<Engine> cached = MakeEngine(options);
    for (bool sampled : {false, true}) {
      SCOPED_TRACE(sampled ? "sampled" : "greedy");
      const Collected expected = RunToEnd(*cold, Request("c", prompt, 24, sampled));
      const Collected first = RunToEnd(*cached, Request("a", prompt, 24, sampled));
      const Collected second = RunToEnd(*cached, Request("b", prompt, 24, sampled));
      EXPECT_EQ(Tokens(first), Tokens(expected));
      EXPECT_EQ(Tokens(second), Tokens(expected));
      EXPECT_EQ(second.summary.cached_prompt_tokens, 70);
      EXPECT_EQ(second.summary.prompt_tokens, 70);
    }
    const PrefixCacheStats stats = cached->Stats().prefix_cache;
    // 16, 32, 48, 64, the prompt's end, and the end of each reply (greedy,
    // sampled).
    EXPECT_EQ(stats.entries, 7);
    EXPECT_GE(stats.hits, 2);
  }
  EXPECT_EQ(cold->Stats().prefix_cache.queries, 0);
}

// A hit tells its caller that the prompt was sent before: each caller (a
// bearer token's name) sees only the states of its own prompts, unless the
// cache is shared across callers.
TEST_F(StateReuseTest, CachedPrefixesAreScopedToTheirCallerUnlessShared) {
  const std::vector<int64_t> prompt = LongPrompt(40);
  for (bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "shared" : "per caller");
    EngineOptions options = CacheOn();
    options.prefix_cache.shared_across_callers = shared;
    std::unique_ptr<Engine> engine = MakeEngine(options);
    GenerationRequest first = Request("a", prompt, 4);
    first.owner = "alice";
    (void)RunToEnd(*engine, std::move(first));
    GenerationRequest other = Request("b", prompt, 4);
    other.owner = "bob";
    EXPECT_EQ(RunToEnd(*engine, std::move(other)).summary.cached_prompt_tokens, shared ? 40 : 0);
    GenerationRequest again = Request("c", prompt, 4);
    again.owner = "alice";
    EXPECT_EQ(RunToEnd(*engine, std::move(again)).summary.cached_prompt_tokens, 40);
  }
}

TEST_F(StateReuseTest, AnExtendedPromptResumesFromTheCachedPromptsEnd) {
  std::unique_ptr<Engine> cold = MakeEngine(CacheOff());
  std::unique_ptr<Engine> cached = MakeEngine(CacheOn());
  const std::vector<int64_t> base = LongPrompt(70);
  (void)RunToEnd(*cached, Request("base", base, 4));
  for (size_t extra : {1u, 9u, 30u}) {
    std::vector<int64_t> prompt = LongPrompt(70 + extra);
    prompt.back() = 'Z';  // not the base's continuation
    const Collected expected = RunToEnd(*cold, Request("c", prompt, 20, true));
    const Collected got = RunToEnd(*cached, Request("x", prompt, 20, true));
    EXPECT_EQ(Tokens(got), Tokens(expected)) << extra;
    // The base's end, 70 tokens, which is not a chunk boundary (16).
    EXPECT_EQ(got.summary.cached_prompt_tokens, 70) << extra;
  }
}

// A chat that resends its history: the next turn resumes after the previous
// reply (the state the previous request ended with), not only after the
// previous prompt, and gives the cold run's tokens.
TEST_F(StateReuseTest, AResentHistoryResumesAfterThePreviousReply) {
  std::unique_ptr<Engine> cold = MakeEngine(CacheOff());
  std::unique_ptr<Engine> cached = MakeEngine(CacheOn());
  const std::vector<int64_t> turn1 = Bytes("Q: Why did the chicken cross the road?\nA:");
  const Collected one = RunToEnd(*cached, Request("t1", turn1, 23));
  ASSERT_TRUE(one.summary.status.ok()) << one.summary.status;
  std::vector<int64_t> history = turn1;
  history.insert(history.end(), one.tokens.begin(), one.tokens.end());
  const std::vector<int64_t> turn2 = Bytes("\nQ: And then what?\nA:");
  history.insert(history.end(), turn2.begin(), turn2.end());
  const Collected expected = RunToEnd(*cold, Request("c", history, 20, true));
  const Collected got = RunToEnd(*cached, Request("t2", history, 20, true));
  EXPECT_EQ(Tokens(got), Tokens(expected));
  // Every token of turn 1 but its last reply token, fed by this turn.
  EXPECT_EQ(got.summary.cached_prompt_tokens,
            static_cast<int64_t>(turn1.size() + one.tokens.size()) - 1);
}

TEST_F(StateReuseTest, TwoTurnsOfASessionEqualTheWholeHistoryAtOnce) {
  std::unique_ptr<Engine> engine = MakeEngine(CacheOff());
  const std::vector<int64_t> turn1 = Bytes("Q: Why did the chicken cross the road?\nA:");
  const std::vector<int64_t> turn2 = Bytes("\nQ: And then what?\nA:");
  GenerationRequest first = Request("t1", turn1, 30);
  first.session_id = "chat";
  first.create_session = true;
  const Collected one = RunToEnd(*engine, first);
  ASSERT_TRUE(one.summary.status.ok()) << one.summary.status;
  GenerationRequest second = Request("t2", turn2, 30);
  second.session_id = "chat";
  const Collected two = RunToEnd(*engine, second);
  ASSERT_TRUE(two.summary.status.ok()) << two.summary.status;
  // The second turn's prompt counts its history, served from the state
  // (all of it but the last generated token, fed by this turn).
  const auto seen = static_cast<int64_t>(turn1.size() + one.tokens.size());
  EXPECT_EQ(two.summary.prompt_tokens, seen + static_cast<int64_t>(turn2.size()));
  EXPECT_EQ(two.summary.cached_prompt_tokens, seen - 1);
  EXPECT_EQ(two.summary.session_position,
            two.summary.prompt_tokens + static_cast<int64_t>(two.tokens.size()));

  std::vector<int64_t> history = turn1;
  history.insert(history.end(), one.tokens.begin(), one.tokens.end());
  history.insert(history.end(), turn2.begin(), turn2.end());
  const Collected whole = RunToEnd(*engine, Request("w", history, 30));
  EXPECT_EQ(Tokens(two), Tokens(whole));
  const SessionStats stats = engine->Stats().sessions;
  EXPECT_EQ(stats.sessions, 1);
  EXPECT_GT(stats.bytes, engine->info().state_bytes_per_sequence);
}

// Session ids are scoped to their owner: another caller naming the same id
// has a session of its own and cannot export or delete the first one's.
TEST_F(StateReuseTest, SessionsAreScopedToTheirOwner) {
  std::unique_ptr<Engine> engine = MakeEngine(CacheOff());
  GenerationRequest alice = Request("a1", Bytes("Knock knock.\n"), 8);
  alice.session_id = "chat";
  alice.create_session = true;
  alice.owner = "alice";
  ASSERT_TRUE(RunToEnd(*engine, alice).summary.status.ok());
  EXPECT_EQ(engine->ExportSession("chat", "bob").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->ExportSession("chat").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine->DeleteSession("chat", "bob").code(), absl::StatusCode::kNotFound);
  // Bob's "chat" is a new session: its turn sees only its own prompt.
  GenerationRequest bob = Request("b1", Bytes("Hi"), 4);
  bob.session_id = "chat";
  bob.create_session = true;
  bob.owner = "bob";
  ASSERT_TRUE(RunToEnd(*engine, bob).summary.status.ok());
  absl::StatusOr<ExportedSession> bobs = engine->ExportSession("chat", "bob");
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  EXPECT_EQ(bobs->tokens, 2 + 4);
  absl::StatusOr<ExportedSession> alices = engine->ExportSession("chat", "alice");
  ASSERT_TRUE(alices.ok()) << alices.status();
  EXPECT_EQ(alices->tokens, 13 + 8);
  EXPECT_EQ(engine->Stats().sessions.sessions, 2);
}

// --caller_session_share reaches the store: a named caller's sessions
// make room from its own (bob's stays), a share smaller than one state
// refuses a named caller's new session, and a share of 1 or the anonymous
// caller is not bounded.
TEST_F(StateReuseTest, ACallersSessionsStayWithinItsShareOfTheSessionMemory) {
  auto turn = [](const std::string& owner, const std::string& id) {
    GenerationRequest r = Request(owner + id, Bytes("Knock knock.\n"), 8);
    r.session_id = id;
    r.owner = owner;
    r.create_session = true;
    return r;
  };
  // One session's bytes, as this model's sessions take them.
  std::unique_ptr<Engine> probe = MakeEngine(CacheOff());
  ASSERT_TRUE(RunToEnd(*probe, turn("", "s")).summary.status.ok());
  const int64_t one = probe->Stats().sessions.bytes;
  ASSERT_GT(one, 0);

  EngineOptions options = CacheOff();
  options.sessions.max_bytes = 5 * one;
  options.caller_session_share = 0.5;  // two and a half sessions
  std::unique_ptr<Engine> engine = MakeEngine(options);
  ASSERT_TRUE(RunToEnd(*engine, turn("bob", "1")).summary.status.ok());
  for (const char* id : {"1", "2", "3"}) {
    ASSERT_TRUE(RunToEnd(*engine, turn("alice", id)).summary.status.ok()) << id;
  }
  EXPECT_EQ(engine->ExportSession("1", "alice").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(engine->ExportSession("2", "alice").ok());
  EXPECT_TRUE(engine->ExportSession("3", "alice").ok());
  EXPECT_TRUE(engine->ExportSession("1", "bob").ok());
  EXPECT_EQ(engine->Stats().sessions.evicted, 1);

  options.caller_session_share = 0.1;  // half a session
  std::unique_ptr<Engine> tight = MakeEngine(options);
  const absl::Status refused = tight->Submit(turn("alice", "1"), std::make_shared<RequestStream>());
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("--caller_session_share"), std::string::npos) << refused;
  EXPECT_TRUE(RunToEnd(*tight, turn("", "1")).summary.status.ok());
  options.caller_session_share = 1;
  std::unique_ptr<Engine> unbounded = MakeEngine(options);
  EXPECT_TRUE(RunToEnd(*unbounded, turn("alice", "1")).summary.status.ok());
}

// The engine's thread drops sessions past their TTL while it is idle: no
// request and no metrics scrape is needed for their memory to come back.
TEST_F(StateReuseTest, AnIdleEngineDropsExpiredSessions) {
  EngineOptions options = CacheOff();
  options.sessions.ttl = absl::Milliseconds(50);
  std::unique_ptr<Engine> engine = MakeEngine(options);
  GenerationRequest r = Request("t", Bytes("Q: Why?\nA:"), 4);
  r.session_id = "brief";
  r.create_session = true;
  ASSERT_TRUE(RunToEnd(*engine, r).summary.status.ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (engine->Stats().sessions.sessions != 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const SessionStats stats = engine->Stats().sessions;
  EXPECT_EQ(stats.sessions, 0);
  EXPECT_EQ(stats.bytes, 0);
  EXPECT_EQ(stats.expired, 1);
}

TEST_F(StateReuseTest, ExportDeleteImportContinuesAsTheUninterruptedSession) {
  std::unique_ptr<Engine> engine = MakeEngine(CacheOff());
  const std::vector<int64_t> turn1 = Bytes("Knock knock.\n");
  const std::vector<int64_t> turn2 = Bytes("Who's there?\n");
  for (const char* id : {"kept", "moved"}) {
    GenerationRequest r = Request(std::string(id) + "-1", turn1, 12);
    r.session_id = id;
    r.create_session = true;
    ASSERT_TRUE(RunToEnd(*engine, r).summary.status.ok());
  }
  absl::StatusOr<ExportedSession> exported = engine->ExportSession("moved");
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->tokens, static_cast<int64_t>(turn1.size()) + 12);
  EXPECT_EQ(exported->position, exported->tokens - 1);
  ASSERT_TRUE(engine->DeleteSession("moved").ok());
  EXPECT_EQ(engine->DeleteSession("moved").code(), absl::StatusCode::kNotFound);

  // Imported into another engine of the same model, it continues exactly.
  std::unique_ptr<Engine> other = MakeEngine(CacheOff());
  absl::StatusOr<int64_t> position = other->ImportSession("moved", exported->data);
  ASSERT_TRUE(position.ok()) << position.status();
  EXPECT_EQ(*position, exported->position);
  GenerationRequest kept = Request("kept-2", turn2, 16, true);
  kept.session_id = "kept";
  GenerationRequest moved = Request("moved-2", turn2, 16, true);
  moved.session_id = "moved";
  EXPECT_EQ(Tokens(RunToEnd(*other, moved)), Tokens(RunToEnd(*engine, kept)));
}

TEST_F(StateReuseTest, BadImportsAreRefusedAndTheEngineServesOn) {
  std::unique_ptr<Engine> engine = MakeEngine(CacheOff());
  GenerationRequest r = Request("t", Bytes("Hello"), 5);
  r.session_id = "s";
  r.create_session = true;
  ASSERT_TRUE(RunToEnd(*engine, r).summary.status.ok());
  const std::string data = engine->ExportSession("s")->data;

  std::string corrupted = data;
  corrupted[corrupted.size() / 2] ^= 1;
  EXPECT_EQ(engine->ImportSession("x", corrupted).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->ImportSession("x", data.substr(0, data.size() - 3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->ImportSession("x", "not a state").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->ImportSession("", data).status().code(), absl::StatusCode::kInvalidArgument);
  std::unique_ptr<Engine> retrained =
      MakeEngine(CacheOff(), 2, {"performer-fortunes", "config", "other weights"});
  const absl::Status other_model = retrained->ImportSession("x", data).status();
  EXPECT_EQ(other_model.code(), absl::StatusCode::kFailedPrecondition) << other_model;

  // Still serving, and the session is intact.
  GenerationRequest next = Request("t2", Bytes(" world"), 5);
  next.session_id = "s";
  EXPECT_TRUE(RunToEnd(*engine, next).summary.status.ok());
  EXPECT_EQ(engine->ExportSession("x").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(StateReuseTest, SessionErrors) {
  EngineOptions off = CacheOff();
  off.sessions.max_bytes = 0;
  std::unique_ptr<Engine> no_sessions = MakeEngine(off);
  GenerationRequest r = Request("a", Bytes("Hi"), 4);
  r.session_id = "s";
  EXPECT_EQ(no_sessions->Submit(r, std::make_shared<RequestStream>()).code(),
            absl::StatusCode::kFailedPrecondition);

  EngineOptions slow = CacheOff();
  slow.step_delay = absl::Milliseconds(20);
  std::unique_ptr<Engine> engine = MakeEngine(slow);
  auto running = std::make_shared<RequestStream>();
  GenerationRequest longer = Request("long", Bytes("Hi"), 50);
  longer.session_id = "s";
  longer.create_session = true;
  ASSERT_TRUE(engine->Submit(longer, running).ok());
  GenerationRequest again = Request("again", Bytes("Hi"), 4);
  again.session_id = "s";
  EXPECT_EQ(engine->Submit(again, std::make_shared<RequestStream>()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->DeleteSession("s").code(), absl::StatusCode::kNotFound);  // no state yet
  ASSERT_TRUE(WaitFor(running).summary.status.ok());

  GenerationRequest too_long = Request("far", LongPrompt(2040), 4);
  too_long.session_id = "s";
  EXPECT_EQ(engine->Submit(too_long, std::make_shared<RequestStream>()).code(),
            absl::StatusCode::kOutOfRange);
  GenerationRequest big_id = Request("id", Bytes("Hi"), 4);
  big_id.session_id = std::string(kMaxSessionIdBytes + 1, 'x');
  EXPECT_EQ(engine->Submit(big_id, std::make_shared<RequestStream>()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(StateReuseTest, SpilledSessionsContinueInTheNextEngine) {
  char pattern[] = "/tmp/state_reuse_test.XXXXXX";
  const std::string dir = mkdtemp(pattern);
  std::vector<int64_t> expected;
  {
    EngineOptions options = CacheOff();
    options.sessions.spill_dir = dir;
    std::unique_ptr<Engine> engine = MakeEngine(options);
    GenerationRequest r = Request("1", Bytes("The cat sat on the"), 8);
    r.session_id = "spill";
    r.create_session = true;
    ASSERT_TRUE(RunToEnd(*engine, r).summary.status.ok());
    // Where the uninterrupted session would go.
    std::unique_ptr<Engine> twin = MakeEngine(CacheOff());
    ASSERT_TRUE(twin->ImportSession("spill", engine->ExportSession("spill")->data).ok());
    GenerationRequest next = Request("2", Bytes(" mat."), 10);
    next.session_id = "spill";
    expected = Tokens(RunToEnd(*twin, next));
    engine->BeginDrain();
    ASSERT_TRUE(engine->WaitIdle(absl::Seconds(10)));
    engine->Stop();
    ASSERT_TRUE(engine->SpillSessions().ok());
  }
  EngineOptions options = CacheOff();
  options.sessions.spill_dir = dir;
  std::unique_ptr<Engine> next_engine = MakeEngine(options);
  EXPECT_EQ(next_engine->Stats().sessions.spilled_sessions, 1);
  GenerationRequest next = Request("2", Bytes(" mat."), 10);
  next.session_id = "spill";
  EXPECT_EQ(Tokens(RunToEnd(*next_engine, next)), expected);
  testing::RemoveTree(dir);
}

// A session exists once created: a turn of an unknown id is NOT_FOUND
// (never a fresh session), create_session of a held id ALREADY_EXISTS; the
// misses are counted by reason.
TEST_F(StateReuseTest, SessionsAreExplicit) {
  std::unique_ptr<Engine> engine = MakeEngine(CacheOff());
  GenerationRequest unknown = Request("u", Bytes("Hi"), 4);
  unknown.session_id = "never-created";
  const absl::Status missing = engine->Submit(unknown, std::make_shared<RequestStream>());
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("session never-created of model performer-fortunes is not "
                                   "held by this replica"),
            std::string::npos)
      << missing;
  EXPECT_EQ(engine->Stats().sessions.sessions, 0);

  GenerationRequest created = Request("c", Bytes("Hi"), 4);
  created.session_id = "chat";
  created.create_session = true;
  ASSERT_TRUE(RunToEnd(*engine, created).summary.status.ok());
  const absl::Status again = engine->Submit(created, std::make_shared<RequestStream>());
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  GenerationRequest without_id = Request("n", Bytes("Hi"), 4);
  without_id.create_session = true;
  EXPECT_EQ(engine->Submit(without_id, std::make_shared<RequestStream>()).code(),
            absl::StatusCode::kInvalidArgument);
  const SessionStats stats = engine->Stats().sessions;
  EXPECT_EQ(stats.misses_not_held, 1);
  EXPECT_EQ(stats.sessions, 1);
}

// TakeSession moves a session: the taker continues it exactly, the giver
// forgets it (exactly one holds it), and both count the move.
TEST_F(StateReuseTest, ATakenSessionMovesAndTheGiverForgetsIt) {
  std::unique_ptr<Engine> giver = MakeEngine(CacheOff());
  std::unique_ptr<Engine> twin = MakeEngine(CacheOff());
  for (Engine* e : {giver.get(), twin.get()}) {
    GenerationRequest r = Request("1", Bytes("Knock knock.\n"), 12);
    r.session_id = "chat";
    r.owner = "alice";
    r.create_session = true;
    ASSERT_TRUE(RunToEnd(*e, r).summary.status.ok());
  }
  std::unique_ptr<Engine> taker = MakeEngine(CacheOff());
  EXPECT_FALSE(taker->HoldsSession("chat", "alice"));
  EXPECT_EQ(giver->TakeSession("chat", "bob").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<ExportedSession> moved = giver->TakeSession("chat", "alice");
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_FALSE(giver->HoldsSession("chat", "alice"));
  EXPECT_EQ(giver->TakeSession("chat", "alice").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(taker->ImportSession("chat", moved->data, "alice", /*moved_in=*/true).ok());
  EXPECT_TRUE(taker->HoldsSession("chat", "alice"));
  GenerationRequest next = Request("2", Bytes("Who's there?\n"), 16);
  next.session_id = "chat";
  next.owner = "alice";
  EXPECT_EQ(Tokens(RunToEnd(*taker, next)), Tokens(RunToEnd(*twin, next)));
  EXPECT_EQ(giver->Stats().sessions.moved_out, 1);
  EXPECT_EQ(giver->Stats().sessions.sessions, 0);
  EXPECT_EQ(taker->Stats().sessions.moved_in, 1);
}

// A session a replica spilled to a shared folder after another replica
// started is found there by that replica, which claims the file: the first
// replica cannot give it out again.
TEST_F(StateReuseTest, ASharedFolderHandsASessionToExactlyOneReplica) {
  char pattern[] = "/tmp/state_reuse_test.XXXXXX";
  const std::string dir = mkdtemp(pattern);
  EngineOptions options = CacheOff();
  options.sessions.spill_dir = dir;
  std::unique_ptr<Engine> a = MakeEngine(options);
  std::unique_ptr<Engine> b = MakeEngine(options);
  std::unique_ptr<Engine> twin = MakeEngine(CacheOff());
  for (Engine* e : {a.get(), twin.get()}) {
    GenerationRequest r = Request("1", Bytes("The cat sat on the"), 8);
    r.session_id = "shared";
    r.create_session = true;
    ASSERT_TRUE(RunToEnd(*e, r).summary.status.ok());
  }
  ASSERT_TRUE(a->SpillSessions().ok());
  EXPECT_FALSE(b->HoldsSession("shared"));  // not in its index: peers are asked first
  GenerationRequest next = Request("2", Bytes(" mat."), 10);
  next.session_id = "shared";
  EXPECT_EQ(Tokens(RunToEnd(*b, next)), Tokens(RunToEnd(*twin, next)));
  EXPECT_EQ(a->TakeSession("shared").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(a->Stats().sessions.spilled_sessions, 0);
  testing::RemoveTree(dir);
}

// --session_persist: every turn's session is written to the folder by the
// writer thread, so that another replica continues it exactly though the
// first one never drained (as after SIGKILL).
TEST_F(StateReuseTest, PersistedSessionsSurviveAReplicaThatNeverDrained) {
  char pattern[] = "/tmp/state_reuse_test.XXXXXX";
  const std::string dir = mkdtemp(pattern);
  EngineOptions options = CacheOff();
  options.sessions.spill_dir = dir;
  options.sessions.persist = true;
  std::unique_ptr<Engine> killed = MakeEngine(options);
  std::unique_ptr<Engine> twin = MakeEngine(CacheOff());
  for (int turn = 0; turn < 2; ++turn) {
    for (Engine* e : {killed.get(), twin.get()}) {
      GenerationRequest r = Request(std::to_string(turn), Bytes(turn == 0 ? "Q: Why?" : "\nA:"), 6);
      r.session_id = "kept";
      r.create_session = turn == 0;
      ASSERT_TRUE(RunToEnd(*e, r).summary.status.ok());
    }
    // Each turn's file is written before the next turn changes the session.
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (killed->Stats().sessions.persisted < turn + 1 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(killed->Stats().sessions.persisted, turn + 1);
  }
  EngineOptions other = CacheOff();
  other.sessions.spill_dir = dir;
  std::unique_ptr<Engine> survivor = MakeEngine(other);
  GenerationRequest next = Request("3", Bytes(" Because."), 10);
  next.session_id = "kept";
  EXPECT_EQ(Tokens(RunToEnd(*survivor, next)), Tokens(RunToEnd(*twin, next)));
  testing::RemoveTree(dir);
}

// With a signing key, only states this deployment exported are imported:
// one signed with the same key continues exactly, an unsigned one (another
// deployment, or made by hand) and one under another key are refused.
TEST_F(StateReuseTest, WithASigningKeyOnlySignedStatesAreImported) {
  EngineOptions signing = CacheOff();
  signing.sessions.signing_key = std::string(32, 's');
  std::unique_ptr<Engine> exporter = MakeEngine(signing);
  std::unique_ptr<Engine> unsigned_engine = MakeEngine(CacheOff());
  for (Engine* e : {exporter.get(), unsigned_engine.get()}) {
    GenerationRequest r = Request("1", Bytes("Knock knock.\n"), 8);
    r.session_id = "chat";
    r.create_session = true;
    ASSERT_TRUE(RunToEnd(*e, r).summary.status.ok());
  }
  const std::string signed_state = exporter->ExportSession("chat")->data;
  const std::string unsigned_state = unsigned_engine->ExportSession("chat")->data;

  std::unique_ptr<Engine> importer = MakeEngine(signing);
  const absl::Status refused = importer->ImportSession("a", unsigned_state).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("not signed"), std::string::npos) << refused;
  EngineOptions other_key = CacheOff();
  other_key.sessions.signing_key = std::string(32, 'o');
  EXPECT_EQ(MakeEngine(other_key)->ImportSession("b", signed_state).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(importer->ImportSession("chat", signed_state).ok());
  GenerationRequest next = Request("2", Bytes("Who's there?\n"), 12);
  next.session_id = "chat";
  EXPECT_EQ(Tokens(RunToEnd(*importer, next)), Tokens(RunToEnd(*exporter, next)));
}

}  // namespace
}  // namespace performer::server
