#include "server/engine/engine.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/decoding/generate.h"
#include "core/decoding/performer_decoder.h"
#include "core/models/model_folder.h"
#include "tests/testing/fixtures.h"

namespace performer::server {
namespace {

// Waits for a RequestStream to finish and keeps everything it produced.
struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  StreamSummary summary;
};

Collected WaitFor(const std::shared_ptr<RequestStream>& stream) {
  Collected out;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  stream->SetListener([&] {
    std::lock_guard<std::mutex> lock(mu);
    RequestStream::Taken taken = stream->Take();
    out.tokens.insert(out.tokens.end(), taken.chunk.token_ids.begin(), taken.chunk.token_ids.end());
    out.text += taken.chunk.text;
    if (taken.summary.has_value()) {
      out.summary = *taken.summary;
      done = true;
      cv.notify_all();
    }
  });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  stream->SetListener(nullptr);
  return out;
}

// Submits `r` and waits for its end. A refused submit fails the test and
// comes back as the summary's status (waiting would never end).
Collected RunToEnd(Engine& engine, GenerationRequest r) {
  auto stream = std::make_shared<RequestStream>();
  absl::Status submitted = engine.Submit(std::move(r), stream);
  if (!submitted.ok()) {
    ADD_FAILURE() << "Submit: " << submitted;
    Collected refused;
    refused.summary.status = submitted;
    return refused;
  }
  return WaitFor(stream);
}

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::FamilyPresent("performer")) {
      GTEST_SKIP() << "fixture folder " << testing::FixtureRoot()
                   << "/performer is absent: engine tests need its models";
    }
    dir_ = testing::FixtureRoot() + "/performer/lm_causal_default";
    auto fixture = testing::LoadCase("performer", "lm_causal_default");
    ASSERT_TRUE(fixture.ok()) << fixture.status();
    fixture_prompt_ = ToVector(fixture->input("prompt")[0]);
    fixture_greedy_ = ToVector(fixture->expect("greedy_tokens")[0]);
  }

  static std::vector<int64_t> ToVector(const torch::Tensor& t) {
    torch::Tensor c = t.to(torch::kLong).contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  }

  std::unique_ptr<Engine> MakeEngine(int64_t capacity, EngineOptions options = {}) {
    auto model = models::LoadModelFolder(dir_);
    EXPECT_TRUE(model.ok()) << model.status();
    auto decoder = decoding::PerformerDecoder::Create(*model, capacity);
    EXPECT_TRUE(decoder.ok()) << decoder.status();
    return std::make_unique<Engine>("lm", std::move(*decoder), nullptr, options);
  }

  GenerationRequest Greedy(std::string id, std::vector<int64_t> prompt, int64_t max_new) {
    GenerationRequest r;
    r.request_id = std::move(id);
    r.prompt = std::move(prompt);
    r.sampling = generation::SamplingParams::Greedy();
    r.sampling.max_new_tokens = max_new;
    return r;
  }

  std::string dir_;
  std::vector<int64_t> fixture_prompt_, fixture_greedy_;
};

TEST_F(EngineTest, GreedyMatchesTheFixtureAndTheCoreLoop) {
  std::unique_ptr<Engine> engine = MakeEngine(4);
  Collected got =
      RunToEnd(*engine, Greedy("a", fixture_prompt_, static_cast<int64_t>(fixture_greedy_.size())));
  EXPECT_TRUE(got.summary.status.ok()) << got.summary.status;
  EXPECT_EQ(got.summary.reason, FinishReason::kLength);
  EXPECT_EQ(std::vector<int64_t>(got.tokens.begin(), got.tokens.end()), fixture_greedy_);
  EXPECT_EQ(got.summary.generated_tokens, static_cast<int64_t>(fixture_greedy_.size()));
  EXPECT_EQ(got.summary.prompt_tokens, static_cast<int64_t>(fixture_prompt_.size()));
  EXPECT_EQ(engine->Stats().active, 0);
}

// A prompt longer than the chunk: the first chunk is one forward, the rest
// is fed token by token inside the batched step. Same tokens as one prefill.
TEST_F(EngineTest, ChunkedPrefillGivesTheSameTokens) {
  EngineOptions options;
  options.prefill_chunk_tokens = 3;
  std::unique_ptr<Engine> engine = MakeEngine(2, options);
  Collected got =
      RunToEnd(*engine, Greedy("a", fixture_prompt_, static_cast<int64_t>(fixture_greedy_.size())));
  EXPECT_EQ(std::vector<int64_t>(got.tokens.begin(), got.tokens.end()), fixture_greedy_);
}

// Bit for bit: 64 requests at once give each request's tokens alone.
TEST_F(EngineTest, OutputDoesNotDependOnTheBatch) {
  const int kRequests = 64;
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < kRequests; ++i) {
    std::vector<int64_t> p;
    for (int j = 0; j < 3 + i % 9; ++j) p.push_back((i * 7 + j * 13) % 100);
    prompts.push_back(p);
  }
  std::vector<std::vector<int32_t>> alone(kRequests);
  {
    std::unique_ptr<Engine> engine = MakeEngine(1);
    for (int i = 0; i < kRequests; ++i) {
      alone[i] = RunToEnd(*engine, Greedy(absl::StrCat(i), prompts[i], 20)).tokens;
      ASSERT_EQ(alone[i].size(), 20u);
    }
  }
  std::unique_ptr<Engine> engine = MakeEngine(kRequests);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kRequests; ++i) {
    streams.push_back(std::make_shared<RequestStream>());
    ASSERT_TRUE(engine->Submit(Greedy(absl::StrCat(i), prompts[i], 20), streams.back()).ok());
  }
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(WaitFor(streams[i]).tokens, alone[i]) << "request " << i;
  }
}

TEST_F(EngineTest, CancelFreesTheSlotAndEndsTheStream) {
  EngineOptions options;
  options.step_delay = absl::Milliseconds(5);
  std::unique_ptr<Engine> engine = MakeEngine(1, options);
  auto stream = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->Submit(Greedy("a", {1, 2, 3}, 40), stream).ok());
  while (engine->Stats().active == 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(engine->Cancel("a"));
  EXPECT_FALSE(engine->Cancel("unknown"));
  // The id is free as soon as Cancel returns; the old request still ends
  // as cancelled and the new one runs normally.
  EXPECT_EQ(RunToEnd(*engine, Greedy("a", {4, 5}, 3)).summary.reason, FinishReason::kLength);
  Collected got = WaitFor(stream);
  EXPECT_EQ(got.summary.reason, FinishReason::kCancelled);
  EXPECT_TRUE(got.summary.status.ok()) << got.summary.status;
  EXPECT_LT(got.tokens.size(), 40u);
  EXPECT_TRUE(engine->WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(engine->Stats().active, 0);
}

TEST_F(EngineTest, DeadlineEndsTheRequest) {
  EngineOptions options;
  options.step_delay = absl::Milliseconds(5);
  std::unique_ptr<Engine> engine = MakeEngine(1, options);
  GenerationRequest r = Greedy("a", {1, 2, 3}, 40);
  r.deadline = absl::Now() + absl::Milliseconds(30);
  Collected got = RunToEnd(*engine, r);
  EXPECT_EQ(got.summary.reason, FinishReason::kDeadline);
  EXPECT_TRUE(absl::IsDeadlineExceeded(got.summary.status));
}

TEST_F(EngineTest, SlowReaderIsEndedWithoutBlockingOthers) {
  std::unique_ptr<Engine> engine = MakeEngine(2);
  auto slow = std::make_shared<RequestStream>(/*max_buffered_tokens=*/3);
  GenerationRequest r = Greedy("slow", {1, 2, 3}, 30);
  r.max_buffered_tokens = 3;
  ASSERT_TRUE(engine->Submit(r, slow).ok());
  Collected fast_got = RunToEnd(*engine, Greedy("fast", {4, 5}, 30));
  EXPECT_EQ(fast_got.tokens.size(), 30u);
  ASSERT_TRUE(engine->WaitIdle(absl::Seconds(10)));
  RequestStream::Taken taken = slow->Take();  // nobody read until now
  EXPECT_EQ(taken.chunk.token_ids.size(), 3u);
  ASSERT_TRUE(taken.summary.has_value());
  EXPECT_TRUE(absl::IsResourceExhausted(taken.summary->status)) << taken.summary->status;
}

TEST_F(EngineTest, QueueBoundsPriorityDrainAndDuplicates) {
  EngineOptions options;
  options.max_queue = 2;
  options.step_delay = absl::Milliseconds(5);
  std::unique_ptr<Engine> engine = MakeEngine(1, options);
  auto running = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->Submit(Greedy("run", {1}, 30), running).ok());
  while (engine->Stats().active == 0) absl::SleepFor(absl::Milliseconds(1));
  EXPECT_TRUE(absl::IsAlreadyExists(engine->Submit(Greedy("run", {1}, 3), nullptr)));
  auto low = std::make_shared<RequestStream>();
  auto high = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->Submit(Greedy("low", {1}, 3), low).ok());
  GenerationRequest urgent = Greedy("high", {1}, 3);
  urgent.priority = 5;
  ASSERT_TRUE(engine->Submit(urgent, high).ok());
  EXPECT_EQ(engine->Stats().queued, 2);
  absl::Status overloaded = engine->Submit(Greedy("extra", {1}, 3), nullptr);
  EXPECT_TRUE(absl::IsResourceExhausted(overloaded)) << overloaded;
  EXPECT_GT(engine->RetryHint(), absl::ZeroDuration());
  Collected high_got = WaitFor(high);
  Collected low_got = WaitFor(low);
  EXPECT_LT(high_got.summary.queue_seconds, low_got.summary.queue_seconds);
  engine->BeginDrain();
  EXPECT_TRUE(absl::IsUnavailable(engine->Submit(Greedy("late", {1}, 3), nullptr)));
  EXPECT_EQ(WaitFor(running).summary.reason, FinishReason::kLength);
}

TEST_F(EngineTest, ValidationNamesTheField) {
  std::unique_ptr<Engine> engine = MakeEngine(1);
  auto check = [&](GenerationRequest r, const std::string& field) {
    absl::Status s = engine->Submit(r, nullptr);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  check(Greedy("a", {}, 3), "prompt");
  check(Greedy("a", {1, 100}, 3), "prompt_tokens[1]");
  check(Greedy("a", {1, 2}, 47), "max_new_tokens");
  GenerationRequest r = Greedy("a", {1}, 3);
  r.sampling.temperature = -1;
  check(r, "temperature");
  r = Greedy("a", {1}, 3);
  r.sampling.top_p = 1.5f;
  check(r, "top_p");
  r = Greedy("a", {1}, 3);
  r.source = {1};
  check(r, "source");
  r = Greedy("a", {1}, 3);
  r.stop_strings = {"x"};
  check(r, "stop_strings");
  EXPECT_EQ(engine->Stats().queued, 0);
}

TEST_F(EngineTest, StopTokenAndEos) {
  std::unique_ptr<Engine> engine = MakeEngine(1);
  GenerationRequest r = Greedy("a", fixture_prompt_, 12);
  r.sampling.stop_token_ids = {fixture_greedy_[2]};
  Collected got = RunToEnd(*engine, r);
  EXPECT_EQ(got.summary.reason, FinishReason::kStopToken);
  ASSERT_GE(got.tokens.size(), 1u);
  EXPECT_EQ(got.tokens.back(), fixture_greedy_[2]);
  r = Greedy("b", fixture_prompt_, 12);
  r.sampling.eos_token_id = fixture_greedy_[1];
  got = RunToEnd(*engine, r);
  EXPECT_EQ(got.summary.reason, FinishReason::kEos);
  EXPECT_EQ(got.tokens.back(), fixture_greedy_[1]);
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  std::unique_ptr<Engine> engine = MakeEngine(2);
  auto run = [&](const std::string& id) {
    GenerationRequest r = Greedy(id, {1, 2, 3}, 20);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 1234;
    return RunToEnd(*engine, r).tokens;
  };
  EXPECT_EQ(run("x"), run("y"));
}

}  // namespace
}  // namespace performer::server
