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
#include "tests/server/engine/fake_sequence_decoder.h"
#include "tests/server/engine/stream_collector.h"
#include "tests/testing/fixtures.h"

namespace performer::server {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::FamilyPresent("performer"))
        << "the repository's fixture folder " << testing::FixtureRoot() << "/performer is missing";
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

  // Each prompt's greedy tokens when its request runs alone, then all the
  // requests submitted at once to one engine: the tokens must not change.
  void ExpectSameTokensAloneAndTogether(const std::vector<std::vector<int64_t>>& prompts,
                                        int64_t max_new) {
    const auto count = static_cast<int64_t>(prompts.size());
    std::vector<std::vector<int32_t>> alone(prompts.size());
    {
      std::unique_ptr<Engine> engine = MakeEngine(1);
      for (size_t i = 0; i < prompts.size(); ++i) {
        alone[i] = RunToEnd(*engine, Greedy(absl::StrCat(i), prompts[i], max_new)).tokens;
        ASSERT_EQ(alone[i].size(), static_cast<size_t>(max_new));
      }
    }
    std::unique_ptr<Engine> engine = MakeEngine(count);
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < prompts.size(); ++i) {
      streams.push_back(std::make_shared<RequestStream>());
      ASSERT_TRUE(
          engine->Submit(Greedy(absl::StrCat(i), prompts[i], max_new), streams.back()).ok());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(WaitFor(streams[i]).tokens, alone[i]) << "request " << i;
    }
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
// extend the sequence chunk by chunk. Same tokens as one prefill.
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
  ExpectSameTokensAloneAndTogether(prompts, 20);
}

// Prompts of one length admitted in one iteration share one forward
// (SequenceDecoder::PrefillBatch); each gets the tokens it gets alone.
TEST_F(EngineTest, PromptsPrefilledTogetherGiveTheTokensTheyGiveAlone) {
  const int kRequests = 8;
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back({(i * 11) % 100, (i * 5 + 3) % 100, (i * 17 + 1) % 100, 7, (i * 3) % 100});
  }
  ExpectSameTokensAloneAndTogether(prompts, 12);
}

TEST_F(EngineTest, CancelFreesTheSlotAndEndsTheStream) {
  EngineOptions options;
  options.step_delay = absl::Milliseconds(5);
  std::unique_ptr<Engine> engine = MakeEngine(1, options);
  auto stream = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->Submit(Greedy("a", {1, 2, 3}, 40), stream).ok());
  ASSERT_TRUE(WaitUntil([&] { return engine->Stats().active > 0; }));
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
  ASSERT_TRUE(WaitUntil([&] { return engine->Stats().active > 0; }));
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
  r.sampling.stop_strings = {"x"};
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

// The engine over a decoder that fails on demand: a failing call ends the
// requests it served, with the decoder's status, and nothing else.
class EngineErrorBoundaryTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> MakeEngine(fake::FakeSequenceDecoder** decoder, int64_t capacity = 4) {
    auto owned = std::make_unique<fake::FakeSequenceDecoder>(/*vocab=*/16, capacity);
    *decoder = owned.get();
    return std::make_unique<Engine>("fake", std::move(owned), nullptr, EngineOptions{});
  }
  static GenerationRequest Request(std::string id, int64_t max_new) {
    GenerationRequest r;
    r.request_id = std::move(id);
    r.prompt = {1, 2};
    r.sampling = generation::SamplingParams::Greedy();
    r.sampling.max_new_tokens = max_new;
    return r;
  }
};

TEST_F(EngineErrorBoundaryTest, TheFakeDecodersTokensComeThrough) {
  fake::FakeSequenceDecoder* decoder = nullptr;
  std::unique_ptr<Engine> engine = MakeEngine(&decoder);
  Collected got = RunToEnd(*engine, Request("a", 4));
  EXPECT_TRUE(got.summary.status.ok()) << got.summary.status;
  EXPECT_EQ(got.tokens, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(decoder->calls().creates, 1);
  EXPECT_EQ(decoder->calls().releases, 1);
}

TEST_F(EngineErrorBoundaryTest, AThrowingStepFailsItsRequestsAndTheEngineServesOn) {
  fake::FakeSequenceDecoder* decoder = nullptr;
  std::unique_ptr<Engine> engine = MakeEngine(&decoder);
  decoder->FailAt("step", 2, fake::FakeFailure::kThrow);
  Collected failed = RunToEnd(*engine, Request("a", 10));
  EXPECT_EQ(failed.summary.reason, FinishReason::kError);
  EXPECT_TRUE(absl::IsInternal(failed.summary.status)) << failed.summary.status;
  EXPECT_NE(failed.summary.status.message().find("fake step threw"), std::string::npos)
      << failed.summary.status;
  EXPECT_EQ(failed.tokens.size(), 2u);  // from the prefill and the first step
  ASSERT_TRUE(engine->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(decoder->active(), 0);  // its slot was released
  Collected next = RunToEnd(*engine, Request("b", 3));
  EXPECT_TRUE(next.summary.status.ok()) << next.summary.status;
  EXPECT_EQ(next.tokens.size(), 3u);
}

TEST_F(EngineErrorBoundaryTest, OutOfMemoryIsResourceExhausted) {
  fake::FakeSequenceDecoder* decoder = nullptr;
  std::unique_ptr<Engine> engine = MakeEngine(&decoder);
  decoder->FailAt("prefill", 1, fake::FakeFailure::kOutOfMemory);
  Collected failed = RunToEnd(*engine, Request("a", 3));
  EXPECT_TRUE(absl::IsResourceExhausted(failed.summary.status)) << failed.summary.status;
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_TRUE(RunToEnd(*engine, Request("b", 3)).summary.status.ok());
}

TEST_F(EngineErrorBoundaryTest, AFailedStatusEndsOnlyThatCallsRequests) {
  fake::FakeSequenceDecoder* decoder = nullptr;
  std::unique_ptr<Engine> engine = MakeEngine(&decoder);
  // The first request's prefill fails; the second, admitted in the same
  // iteration, is unaffected.
  decoder->FailAt("prefill", 1, fake::FakeFailure::kStatus);
  auto first = std::make_shared<RequestStream>();
  auto second = std::make_shared<RequestStream>();
  ASSERT_TRUE(engine->Submit(Request("a", 3), first).ok());
  ASSERT_TRUE(engine->Submit(Request("b", 3), second).ok());
  Collected a = WaitFor(first);
  Collected b = WaitFor(second);
  EXPECT_TRUE(absl::IsInternal(a.summary.status)) << a.summary.status;
  EXPECT_NE(a.summary.status.message().find("prefill"), std::string::npos) << a.summary.status;
  EXPECT_TRUE(b.summary.status.ok()) << b.summary.status;
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{3, 4, 5}));
}

TEST_F(EngineErrorBoundaryTest, ChunkedPrefillUsesTheBudget) {
  auto owned = std::make_unique<fake::FakeSequenceDecoder>(/*vocab=*/64, /*capacity=*/2);
  fake::FakeSequenceDecoder* decoder = owned.get();
  EngineOptions options;
  options.prefill_chunk_tokens = 4;
  Engine engine("fake", std::move(owned), nullptr, options);
  GenerationRequest r = Request("long", 2);
  r.prompt.assign(10, 1);
  Collected got = RunToEnd(engine, r);
  EXPECT_TRUE(got.summary.status.ok()) << got.summary.status;
  EXPECT_EQ(decoder->calls().prefill_tokens, (std::vector<int64_t>{4}));
  EXPECT_EQ(decoder->calls().extend_tokens, (std::vector<int64_t>{4, 2}));
}

}  // namespace
}  // namespace performer::server
