#include "server/engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace performer::server {
namespace {

using generation::FinishReason;

std::unique_ptr<ScheduledSequence> Seq(const std::string& id, size_t prompt_tokens,
                                       int32_t priority = 0) {
  auto s = std::make_unique<ScheduledSequence>();
  s->request.request_id = id;
  s->request.prompt.assign(prompt_tokens, 1);
  s->request.priority = priority;
  s->stream = std::make_shared<RequestStream>();
  s->accepted = absl::Now();
  return s;
}

SchedulerOptions Options(int64_t capacity, int64_t chunk = 8, int64_t max_prefills = 4,
                         int64_t max_queue = 16) {
  SchedulerOptions o;
  o.capacity = capacity;
  o.prefill_chunk_tokens = chunk;
  o.max_prefills_per_step = max_prefills;
  o.max_queue = max_queue;
  return o;
}

std::vector<std::string> Ids(const IterationPlan& plan) {
  std::vector<std::string> ids;
  for (const PrefillChunk& c : plan.prefills) ids.push_back(c.sequence->request.request_id);
  return ids;
}

// What the engine does after a plan: every chunk fed, and a sequence whose
// prompt is complete has a token to step.
void Feed(const IterationPlan& plan) {
  for (const PrefillChunk& c : plan.prefills) {
    c.sequence->has_slot = true;
    c.sequence->prompt_fed = c.end;
  }
}

TEST(SchedulerTest, AdmitsByPriorityThenArrivalWhileSlotsLast) {
  Scheduler scheduler(Options(/*capacity=*/2));
  ASSERT_TRUE(scheduler.Submit(Seq("low", 2)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("high", 2, /*priority=*/5)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("low2", 2)).ok());
  IterationPlan plan = scheduler.Schedule(absl::Now());
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"high", "low"}));
  for (const PrefillChunk& c : plan.prefills) EXPECT_TRUE(c.first);
  EXPECT_EQ(scheduler.counts().active, 2);
  EXPECT_EQ(scheduler.counts().queued, 1);
  // No slot is free: nothing is admitted until one retires.
  Feed(plan);
  EXPECT_TRUE(Ids(scheduler.Schedule(absl::Now())).empty());
  scheduler.running()[0]->End(FinishReason::kLength);
  EXPECT_EQ(scheduler.Retire().size(), 1u);
  EXPECT_EQ(Ids(scheduler.Schedule(absl::Now())), (std::vector<std::string>{"low2"}));
}

TEST(SchedulerTest, ChunksLongPromptsUnderTheBudgetAndContinuesThemFirst) {
  Scheduler scheduler(Options(/*capacity=*/4, /*chunk=*/8));
  ASSERT_TRUE(scheduler.Submit(Seq("long", 20)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("short", 3)).ok());
  IterationPlan first = scheduler.Schedule(absl::Now());
  // "long" takes the whole budget of 8 tokens; "short" waits.
  ASSERT_EQ(Ids(first), (std::vector<std::string>{"long"}));
  EXPECT_EQ(first.prefills[0].begin, 0u);
  EXPECT_EQ(first.prefills[0].end, 8u);
  Feed(first);
  IterationPlan second = scheduler.Schedule(absl::Now());
  ASSERT_EQ(Ids(second), (std::vector<std::string>{"long"}));
  EXPECT_FALSE(second.prefills[0].first);
  EXPECT_EQ(second.prefills[0].begin, 8u);
  EXPECT_EQ(second.prefills[0].end, 16u);
  Feed(second);
  // The last 4 tokens of "long", then "short" (3) within the budget of 8.
  IterationPlan third = scheduler.Schedule(absl::Now());
  EXPECT_EQ(Ids(third), (std::vector<std::string>{"long", "short"}));
  EXPECT_EQ(third.prefills[0].end, 20u);
  EXPECT_TRUE(third.prefills[1].first);
  Feed(third);
  EXPECT_EQ(scheduler.DecodeBatch().size(), 2u);
}

TEST(SchedulerTest, BoundsPrefillForwardsPerIteration) {
  Scheduler scheduler(Options(/*capacity=*/8, /*chunk=*/100, /*max_prefills=*/2));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(scheduler.Submit(Seq("r" + std::to_string(i), 1)).ok());
  for (size_t expected : {2u, 2u, 1u}) {
    IterationPlan plan = scheduler.Schedule(absl::Now());
    EXPECT_EQ(plan.prefills.size(), expected);
    Feed(plan);
  }
}

// Where a batch counts as one forward (a GPU), fresh prompts' first chunks
// of one length are one forward (the runner prefills them as one batch); a
// chunk that continues a prompt, or one with a source (or a state to resume
// from), is a forward of its own.
TEST(SchedulerTest, FirstChunksOfOneLengthShareAForward) {
  SchedulerOptions options = Options(/*capacity=*/16, /*chunk=*/8, /*max_prefills=*/2);
  options.batched_prefill_is_one_forward = true;
  Scheduler scheduler(options);
  ASSERT_TRUE(scheduler.Submit(Seq("long", 12)).ok());  // chunks of 8 and 4
  IterationPlan plan = scheduler.Schedule(absl::Now());
  ASSERT_EQ(Ids(plan), (std::vector<std::string>{"long"}));
  EXPECT_TRUE(plan.prefills[0].Batchable());
  Feed(plan);
  auto translated = Seq("translated", 2);  // an encoder-decoder request
  translated->request.source = {7, 8};
  ASSERT_TRUE(scheduler.Submit(std::move(translated)).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(scheduler.Submit(Seq("two" + std::to_string(i), 2)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("one", 1)).ok());
  // "long"'s second chunk (4 tokens) and "translated" are the two forwards,
  // and the 2-token prompts would start a third.
  plan = scheduler.Schedule(absl::Now());
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"long", "translated"}));
  EXPECT_FALSE(plan.prefills[0].Batchable());
  EXPECT_FALSE(plan.prefills[1].Batchable());
  Feed(plan);
  // Three 2-token prompts share the first forward, the 1-token one is the
  // second: 7 tokens, two forwards.
  plan = scheduler.Schedule(absl::Now());
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"two0", "two1", "two2", "one"}));
  for (const PrefillChunk& c : plan.prefills) EXPECT_TRUE(c.Batchable());
}

TEST(SchedulerTest, AlwaysRunsOneChunk) {
  // A budget of 4 tokens and a prompt of 3 after one of 2: the second does
  // not fit this iteration, the first always runs.
  Scheduler scheduler(Options(/*capacity=*/4, /*chunk=*/4));
  ASSERT_TRUE(scheduler.Submit(Seq("a", 2)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("b", 3)).ok());
  IterationPlan plan = scheduler.Schedule(absl::Now());
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a"}));
  Feed(plan);
  EXPECT_EQ(Ids(scheduler.Schedule(absl::Now())), (std::vector<std::string>{"b"}));
}

TEST(SchedulerTest, RefusesWhenTheQueueIsFullDuplicatesAndWhileDraining) {
  Scheduler scheduler(Options(/*capacity=*/1, 8, 4, /*max_queue=*/1));
  ASSERT_TRUE(scheduler.Submit(Seq("a", 1)).ok());
  Feed(scheduler.Schedule(absl::Now()));  // "a" holds the slot
  ASSERT_TRUE(scheduler.Submit(Seq("b", 1)).ok());
  EXPECT_EQ(scheduler.Submit(Seq("b", 1)).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(scheduler.Submit(Seq("c", 1)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_GE(scheduler.RetryHint(), absl::Milliseconds(50));
  scheduler.BeginDrain();
  EXPECT_TRUE(scheduler.draining());
  EXPECT_EQ(scheduler.Submit(Seq("d", 1)).code(), absl::StatusCode::kUnavailable);
}

// Requests that arrive together, before an iteration admits any, take the
// free slots and max_queue places beyond them.
TEST(SchedulerTest, ABurstFillsTheFreeSlotsAndTheQueue) {
  Scheduler scheduler(Options(/*capacity=*/3, 8, 4, /*max_queue=*/2));
  for (const char* id : {"a", "b", "c", "d", "e"}) ASSERT_TRUE(scheduler.Submit(Seq(id, 1)).ok());
  EXPECT_EQ(scheduler.Submit(Seq("f", 1)).code(), absl::StatusCode::kResourceExhausted);
  Feed(scheduler.Schedule(absl::Now()));
  EXPECT_EQ(scheduler.counts().active, 3);
  EXPECT_EQ(scheduler.counts().queued, 2);
  EXPECT_EQ(scheduler.Submit(Seq("f", 1)).code(), absl::StatusCode::kResourceExhausted);
}

TEST(SchedulerTest, CancelAtEachStage) {
  Scheduler scheduler(Options(/*capacity=*/1, /*chunk=*/2));
  ASSERT_TRUE(scheduler.Submit(Seq("running", 4)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("queued", 1)).ok());
  IterationPlan plan = scheduler.Schedule(absl::Now());
  Feed(plan);  // "running" is half prefilled
  EXPECT_FALSE(scheduler.Cancel("nope"));
  EXPECT_TRUE(scheduler.Cancel("queued"));
  EXPECT_TRUE(scheduler.Cancel("running"));
  // The ids are free at once.
  EXPECT_TRUE(scheduler.Submit(Seq("queued", 1)).ok());
  plan = scheduler.Schedule(absl::Now());
  ASSERT_EQ(plan.dropped.size(), 1u);
  EXPECT_EQ(plan.dropped[0]->stream->cancel_reason(), FinishReason::kCancelled);
  // The cancelled prompt gets no more chunks and is not stepped.
  EXPECT_TRUE(plan.prefills.empty());
  EXPECT_TRUE(scheduler.DecodeBatch().empty());
  ASSERT_EQ(scheduler.running().size(), 1u);
  EXPECT_EQ(scheduler.running()[0]->finish, FinishReason::kCancelled);
  EXPECT_EQ(scheduler.Retire().size(), 1u);
  EXPECT_EQ(Ids(scheduler.Schedule(absl::Now())), (std::vector<std::string>{"queued"}));
}

TEST(SchedulerTest, RequestIdsAreScopedToTheirOwner) {
  Scheduler scheduler(Options(/*capacity=*/4));
  auto owned = [](const std::string& id, const std::string& owner) {
    std::unique_ptr<ScheduledSequence> s = Seq(id, 1);
    s->request.owner = owner;
    return s;
  };
  std::unique_ptr<ScheduledSequence> alice = owned("job", "alice");
  std::unique_ptr<ScheduledSequence> bob = owned("job", "bob");
  const std::shared_ptr<RequestStream> alice_stream = alice->stream;
  const std::shared_ptr<RequestStream> bob_stream = bob->stream;
  ASSERT_TRUE(scheduler.Submit(std::move(alice)).ok());
  // The same id under another owner is another request.
  ASSERT_TRUE(scheduler.Submit(std::move(bob)).ok());
  EXPECT_EQ(scheduler.Submit(owned("job", "alice")).code(), absl::StatusCode::kAlreadyExists);
  // An owner reaches only its own id; "" (anonymous) is an owner too.
  EXPECT_FALSE(scheduler.Cancel("job"));
  EXPECT_FALSE(scheduler.Cancel("job", "carol"));
  EXPECT_TRUE(scheduler.Cancel("job", "bob"));
  EXPECT_EQ(bob_stream->cancel_reason(), FinishReason::kCancelled);
  EXPECT_EQ(alice_stream->cancel_reason(), FinishReason::kNone);
  // Any owner's: what a "cancel_any" caller does.
  ASSERT_TRUE(scheduler.Submit(owned("job", "")).ok());
  EXPECT_TRUE(scheduler.CancelAnyOwner("job"));
  EXPECT_EQ(alice_stream->cancel_reason(), FinishReason::kCancelled);
  EXPECT_FALSE(scheduler.CancelAnyOwner("job"));
}

TEST(SchedulerTest, CancelAfterScheduleKeepsTheSequenceOutOfTheStep) {
  Scheduler scheduler(Options(/*capacity=*/2));
  ASSERT_TRUE(scheduler.Submit(Seq("a", 1)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("b", 1)).ok());
  Feed(scheduler.Schedule(absl::Now()));
  ASSERT_TRUE(scheduler.Cancel("a"));
  const std::vector<ScheduledSequence*> batch = scheduler.DecodeBatch();
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->request.request_id, "b");
}

TEST(SchedulerTest, DeadlinesExpireQueuedAndRunningRequests) {
  Scheduler scheduler(Options(/*capacity=*/1));
  auto running = Seq("running", 1);
  running->request.deadline = absl::Now() + absl::Hours(1);
  auto queued = Seq("queued", 1);
  queued->request.deadline = absl::Now() + absl::Hours(1);
  ASSERT_TRUE(scheduler.Submit(std::move(running)).ok());
  ASSERT_TRUE(scheduler.Submit(std::move(queued)).ok());
  Feed(scheduler.Schedule(absl::Now()));
  IterationPlan later = scheduler.Schedule(absl::Now() + absl::Hours(2));
  ASSERT_EQ(later.dropped.size(), 1u);
  EXPECT_EQ(later.dropped[0]->request.request_id, "queued");
  ASSERT_EQ(scheduler.running().size(), 1u);
  EXPECT_EQ(scheduler.running()[0]->finish, FinishReason::kDeadline);
  EXPECT_EQ(scheduler.running()[0]->status.code(), absl::StatusCode::kDeadlineExceeded);
}

// A drain refuses the queue at once (its clients retry on another replica)
// and lets the running requests finish.
TEST(SchedulerTest, DrainingDropsTheQueuedRequestsAtOnce) {
  Scheduler scheduler(Options(/*capacity=*/1));
  ASSERT_TRUE(scheduler.Submit(Seq("running", 1)).ok());
  Feed(scheduler.Schedule(absl::Now()));
  ASSERT_TRUE(scheduler.Submit(Seq("queued", 1)).ok());
  scheduler.BeginDrain();
  const IterationPlan plan = scheduler.Schedule(absl::Now());
  ASSERT_EQ(plan.dropped.size(), 1u);
  EXPECT_EQ(plan.dropped[0]->request.request_id, "queued");
  EXPECT_EQ(plan.dropped[0]->finish, FinishReason::kError);
  EXPECT_EQ(plan.dropped[0]->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(scheduler.counts().queued, 0);
  ASSERT_EQ(scheduler.running().size(), 1u);
  EXPECT_EQ(scheduler.running()[0]->request.request_id, "running");
  EXPECT_FALSE(scheduler.running()[0]->finished());
}

// A queued request that a free slot awaits is served through the drain;
// those beyond the free slots are refused at once.
TEST(SchedulerTest, DrainingServesTheQueuedRequestsThatFreeSlotsAwait) {
  Scheduler scheduler(Options(/*capacity=*/2));
  ASSERT_TRUE(scheduler.Submit(Seq("running", 1)).ok());
  Feed(scheduler.Schedule(absl::Now()));
  ASSERT_TRUE(scheduler.Submit(Seq("next", 1)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("beyond", 1)).ok());
  scheduler.BeginDrain();
  const IterationPlan plan = scheduler.Schedule(absl::Now());
  ASSERT_EQ(plan.dropped.size(), 1u);
  EXPECT_EQ(plan.dropped[0]->request.request_id, "beyond");
  EXPECT_EQ(plan.dropped[0]->status.code(), absl::StatusCode::kUnavailable);
  ASSERT_EQ(scheduler.running().size(), 2u);
  EXPECT_EQ(scheduler.running()[1]->request.request_id, "next");
  EXPECT_EQ(scheduler.counts().queued, 0);
}

std::unique_ptr<ScheduledSequence> SeqOf(const std::string& owner, const std::string& id) {
  std::unique_ptr<ScheduledSequence> s = Seq(id, 1);
  s->request.owner = owner;
  return s;
}

// A caller at its share of the slots waits while others' requests are
// admitted, though it came first; the anonymous caller is not bounded.
TEST(SchedulerTest, ACallerHoldsAtMostItsShareOfTheSlots) {
  SchedulerOptions options = Options(/*capacity=*/4, /*chunk=*/8, /*max_prefills=*/8);
  options.max_running_per_caller = 2;
  Scheduler scheduler(options);
  for (const char* id : {"a1", "a2", "a3", "a4"})
    ASSERT_TRUE(scheduler.Submit(SeqOf("alice", id)).ok());
  for (const char* id : {"b1", "b2"}) ASSERT_TRUE(scheduler.Submit(SeqOf("bob", id)).ok());
  const IterationPlan plan = scheduler.Schedule(absl::Now());
  EXPECT_EQ(Ids(plan), (std::vector<std::string>{"a1", "a2", "b1", "b2"}));
  EXPECT_EQ(scheduler.counts().queued, 2);

  Scheduler anonymous(options);
  for (const char* id : {"x1", "x2", "x3", "x4"}) ASSERT_TRUE(anonymous.Submit(SeqOf("", id)).ok());
  EXPECT_EQ(Ids(anonymous.Schedule(absl::Now())).size(), 4u);
}

// A caller with its share of slots and queue taken is refused, naming it;
// others are not.
TEST(SchedulerTest, ACallerBeyondItsShareIsRefused) {
  SchedulerOptions options = Options(/*capacity=*/2);
  options.max_running_per_caller = 1;
  options.max_queued_per_caller = 2;
  Scheduler scheduler(options);
  for (const char* id : {"a1", "a2", "a3"}) ASSERT_TRUE(scheduler.Submit(SeqOf("alice", id)).ok());
  const absl::Status refused = scheduler.Submit(SeqOf("alice", "a4"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  EXPECT_NE(refused.message().find("caller alice has 3 requests"), std::string::npos) << refused;
  EXPECT_TRUE(scheduler.Submit(SeqOf("bob", "b1")).ok());
  EXPECT_TRUE(scheduler.Submit(SeqOf("", "x1")).ok());
}

TEST(SchedulerTest, DrainWaitsForIdleAndStopHandsEverythingBack) {
  Scheduler scheduler(Options(/*capacity=*/1));
  ASSERT_TRUE(scheduler.Submit(Seq("a", 1)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("b", 1)).ok());
  Feed(scheduler.Schedule(absl::Now()));
  scheduler.BeginDrain();
  EXPECT_FALSE(scheduler.WaitIdle(absl::Milliseconds(10)));
  scheduler.Stop();
  EXPECT_FALSE(scheduler.WaitForWork());
  EXPECT_EQ(scheduler.TakeAll().size(), 2u);
  EXPECT_TRUE(scheduler.WaitIdle(absl::Seconds(5)));
  EXPECT_EQ(scheduler.counts().active, 0);
}

}  // namespace
}  // namespace performer::server

namespace performer::server {
namespace {

// The retry hint of a full queue is the time until the next slot frees: the
// mean service time over the slots, whatever time the requests spent
// queued (which is the wait being estimated, not part of it).
TEST(SchedulerTest, RetryHintIsTheServiceTimeOverTheSlots) {
  Scheduler scheduler(Options(/*capacity=*/2, /*chunk=*/8, /*max_prefills=*/4, /*max_queue=*/1));
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(scheduler.Submit(Seq("a", 2)).ok());
  ASSERT_TRUE(scheduler.Submit(Seq("b", 2)).ok());
  // Admitted long after they were accepted: queueing time is not service.
  IterationPlan plan = scheduler.Schedule(t0 + absl::Seconds(100));
  Feed(plan);
  ASSERT_TRUE(scheduler.Submit(Seq("c", 2)).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(scheduler.Submit(Seq("d", 2))));
  for (const auto& s : scheduler.running()) s->End(FinishReason::kLength);
  ASSERT_EQ(scheduler.Retire(t0 + absl::Seconds(104)).size(), 2u);
  // Served 4 s each, 2 slots: a slot frees every 2 s.
  EXPECT_NEAR(absl::ToDoubleSeconds(scheduler.RetryHint()), 2.0, 1e-6);
  // A request that never got a slot (cancelled while queued) says nothing
  // of the service time.
  ASSERT_TRUE(scheduler.Cancel("c"));
  plan = scheduler.Schedule(t0 + absl::Seconds(104));
  ASSERT_EQ(plan.dropped.size(), 1u);
  EXPECT_TRUE(plan.prefills.empty());
  EXPECT_NEAR(absl::ToDoubleSeconds(scheduler.RetryHint()), 2.0, 1e-6);
  // The mean moves by a tenth of each new service time.
  ASSERT_TRUE(scheduler.Submit(Seq("e", 2)).ok());
  Feed(scheduler.Schedule(t0 + absl::Seconds(110)));
  scheduler.running()[0]->End(FinishReason::kLength);
  ASSERT_EQ(scheduler.Retire(t0 + absl::Seconds(111)).size(), 1u);
  EXPECT_NEAR(absl::ToDoubleSeconds(scheduler.RetryHint()), (0.9 * 4.0 + 0.1 * 1.0) / 2, 1e-6);
}

}  // namespace
}  // namespace performer::server
