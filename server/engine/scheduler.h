// The engine's scheduler: which request gets a state slot, which prompt
// chunks run under the per-iteration prefill budget, and which sequences
// join the decode step. It knows nothing of tensors or models: it sees a
// sequence as a request, a prompt length and how much of it was fed.
//
// Policy, per iteration (Schedule):
//   1. Queued requests that were cancelled or passed their deadline leave
//      the queue (`dropped`), and so do all of them once the scheduler
//      drains (ended with DrainingError: their clients retry elsewhere at
//      once); running sequences that were cancelled or passed their deadline
//      are marked finished.
//   2. Prefill chunks of at most prefill_chunk_tokens, under a budget of the
//      same size and of max_prefills_per_step forwards (at least one chunk
//      per iteration, so a prompt always progresses; the Batchable chunks
//      of one length are one forward where batched_prefill_is_one_forward):
//      first the next chunk of prompts already being prefilled, in
//      admission order, then waiting requests by priority (FIFO among
//      equals) while slots are free; their first chunk comes with the
//      slot. Chunk boundaries are multiples of prefill_chunk_tokens counted
//      from where the prompt starts (or resumes: a cached prefix ends on
//      such a boundary), never of the budget left, so a request's tokens do
//      not depend on what it is batched with.
// After the prefills, DecodeBatch() is every sequence that has a sampled
// token to feed; Retire() removes the finished ones.
//
// Thread-safety: Submit, Cancel, BeginDrain, Stats and WaitIdle may be
// called from any thread; everything else from the engine thread only. The
// shared state is guarded by mu_ (checked by clang's -Wthread-safety); the
// engine thread, the only one that changes running_, reads it without the
// lock (running(), DecodeBatch()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/generation/finish_reason.h"
#include "server/engine/generation_request.h"
#include "server/engine/request_stream.h"

namespace performer::server {

// Opaque to the scheduler: what the output stage keeps per sequence
// (sampler, detokenizer, context); output_processor.h defines it.
struct SequenceOutput;
// Opaque to the scheduler: a state the sequence resumes from (a cached
// prefix's or its session's); model_runner.h defines it.
struct ResumePoint;

// One request from submission to retirement.
struct ScheduledSequence {
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;
  absl::Time accepted;
  absl::Time admitted = absl::InfinitePast();
  absl::Time first_token = absl::InfinitePast();
  absl::Time last_token_time = absl::InfinitePast();
  uint64_t decoder_id = 0;  // the decoder's sequence id, once it has a slot
  bool has_slot = false;
  // Prompt tokens the decoder has consumed. A sequence that resumes from a
  // state starts at the tokens that state covers: its first chunk restores
  // the state and feeds the rest (nothing, when the state covers the whole
  // prompt and carries the logits after it).
  size_t prompt_fed = 0;
  std::shared_ptr<const ResumePoint> resume;
  size_t cached_prompt_tokens = 0;  // served from a saved state: a prefix hit, a session's history
  // A session's turn: the tokens the session fed before this request (the
  // prompt starts with the ones it saw but did not feed yet, `pending`).
  std::vector<int64_t> history;
  size_t pending_tokens = 0;
  int64_t last_token = -1;  // sampled, still to be fed by the next step
  int64_t generated = 0;    // tokens emitted
  double prefill_seconds = 0;
  generation::FinishReason finish = generation::FinishReason::kNone;
  absl::Status status;  // non-OK: the request failed
  // The output stage's state; its deleter is set with it, so that this
  // header needs no definition of SequenceOutput.
  std::unique_ptr<SequenceOutput, void (*)(SequenceOutput*)> output{nullptr, nullptr};

  bool finished() const { return finish != generation::FinishReason::kNone; }
  bool prefilling() const { return prompt_fed < request.prompt.size(); }
  void End(generation::FinishReason reason, absl::Status why = absl::OkStatus()) {
    finish = reason;
    status = std::move(why);
  }
  // Ends the sequence when its reader asked for it (Cancel RPC, client
  // cancel or disconnect: kCancelled, status OK; the RPC's deadline:
  // kDeadline, DEADLINE_EXCEEDED) or `deadline_passed`; true if it did.
  bool EndIfCancelled(bool deadline_passed = false);
};

struct SchedulerOptions {
  int64_t capacity = 1;                // state slots of the decoder
  int64_t max_queue = 256;             // waiting requests beyond the slots
  int64_t prefill_chunk_tokens = 512;  // chunk size and per-iteration prefill budget
  // Prefill forwards per iteration, whatever their size: each costs a pass
  // over the weights, so many short prompts arriving at once would
  // otherwise stall the running streams as much as one long one.
  int64_t max_prefills_per_step = 4;
  // How the Batchable first chunks of one length, which the runner feeds as
  // one forward, count against max_prefills_per_step: as one forward (on a
  // GPU, where a short forward costs the launches of its kernels whatever
  // its rows) or as one per chunk (on a CPU, where its cost grows with its
  // rows: the token budget alone would let 32 short prompts stall the
  // running streams at once).
  bool batched_prefill_is_one_forward = false;
  // Fairness between callers (GenerationRequest::owner, a token's name): a
  // named caller holds at most max_running_per_caller slots at once (its
  // other requests wait while other callers' are admitted), and has at most
  // max_running_per_caller + max_queued_per_caller requests queued or
  // running (RESOURCE_EXHAUSTED beyond). The anonymous caller ("": every
  // client of a server without tokens) is not bounded. 0 = no bound.
  int64_t max_running_per_caller = 0;
  int64_t max_queued_per_caller = 0;
};

// One prompt chunk to feed: tokens [begin, end) of the sequence's prompt.
// `first` chunks are fed by a fresh slot's Prefill (or, for a sequence that
// resumes from a state, its Restore and an Extend of the rest, possibly
// empty), the others by Extend.
struct PrefillChunk {
  ScheduledSequence* sequence = nullptr;
  size_t begin = 0;
  size_t end = 0;
  bool first = false;

  // A fresh prompt's first chunk: no state to resume from, no source. The
  // runner prefills an iteration's Batchable chunks of one length as one
  // forward (ModelRunner::PrefillFirst).
  bool Batchable() const;
};

struct IterationPlan {
  // Left the queue without a slot, cancelled or expired (ended, with the
  // reason): their streams are still to hear of it.
  std::vector<std::unique_ptr<ScheduledSequence>> dropped;
  // In order: continuing prompts, then new admissions.
  std::vector<PrefillChunk> prefills;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a sequence. UNAVAILABLE when draining or stopped,
  // ALREADY_EXISTS for a live request_id of the same owner,
  // RESOURCE_EXHAUSTED when the queue is full. On error the sequence is not
  // kept.
  absl::Status Submit(std::unique_ptr<ScheduledSequence> sequence);
  // Asks `owner`'s queued or running request `request_id` to end with
  // kCancelled (its stream's cancel); false if `owner` has no live request
  // with this id.
  bool Cancel(const std::string& request_id, const std::string& owner = "");
  // The same for every owner's live request with this id (an
  // administrator's cancel); false if there is none.
  bool CancelAnyOwner(const std::string& request_id);

  // Engine thread: blocks until there is work, Stop() or `max_wait` has
  // passed; false when stopped.
  bool WaitForWork(absl::Duration max_wait = absl::InfiniteDuration());
  // Engine thread: true if there is work now (WaitForWork without waiting).
  bool HasWork() const;
  IterationPlan Schedule(absl::Time now);
  // Every running sequence that has a token to feed: not finished, not
  // cancelled, its prompt complete.
  std::vector<ScheduledSequence*> DecodeBatch() const ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Ends the running sequences whose reader cancelled since Schedule, then
  // removes every finished one (their ids leave the live set at once, so a
  // client may reuse an id as soon as it hears of the end). `now` times
  // their service for RetryHint.
  std::vector<std::unique_ptr<ScheduledSequence>> Retire(absl::Time now = absl::Now());
  // After Stop(): every queued and running sequence, removed.
  std::vector<std::unique_ptr<ScheduledSequence>> TakeAll();
  const std::vector<std::unique_ptr<ScheduledSequence>>& running() const
      ABSL_NO_THREAD_SAFETY_ANALYSIS {  // engine thread: running_'s only writer
    return running_;
  }

  // New submissions get UNAVAILABLE; running requests go on, and the next
  // Schedule drops the queued ones with UNAVAILABLE.
  void BeginDrain();
  bool draining() const;
  // Wakes WaitForWork for good; new submissions get UNAVAILABLE.
  void Stop();
  // Blocks until Stop() (the engine's stall test hook).
  void WaitUntilStopped();
  // True once nothing is queued or running (false at the timeout).
  bool WaitIdle(absl::Duration timeout);

  struct Counts {
    int64_t capacity = 0;
    int64_t active = 0;  // sequences holding or about to hold a slot
    int64_t queued = 0;
  };
  Counts counts() const;
  // For the RESOURCE_EXHAUSTED retry hint: the expected time until a place
  // in the queue frees, which is when the next running sequence retires
  // (the head of the queue then takes its slot). With every slot busy,
  // sequences retire on average every S / capacity, S being the mean
  // service time (admission to retirement; time spent queued is left out,
  // since it is itself the wait being estimated). Between 10 ms and 60 s.
  absl::Duration RetryHint() const;
  // When work arrived at an idle scheduler, or the last iteration ended.
  absl::Time last_activity() const;
  void NoteIterationEnd(absl::Time when);

 private:
  // Where the next prefill chunk of `sequence` ends: at the next multiple of
  // the chunk size (counted from the sequence's start, so that a resumed
  // prompt's chunks still end on the prefix cache's interval boundaries),
  // or the prompt's end.
  size_t ChunkEnd(const ScheduledSequence& sequence) const;
  void NoteRetiredLocked(const ScheduledSequence& sequence, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The conditions the engine thread and WaitIdle wait for.
  bool WorkOrStopLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Step 1 of Schedule: the queued requests that leave without a slot
  // (cancelled, past their deadline, or refused by the drain) into
  // plan.dropped.
  void DropLeavingLocked(IterationPlan& plan, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RESOURCE_EXHAUSTED when `owner` has its share of slots and queue
  // (SchedulerOptions::max_queued_per_caller) already.
  absl::Status CheckCallerShareLocked(const std::string& owner) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SchedulerOptions options_;
  mutable absl::Mutex mu_;
  // Waiting sequences by (-priority, arrival number).
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<ScheduledSequence>> queue_
      ABSL_GUARDED_BY(mu_);
  int64_t arrivals_ ABSL_GUARDED_BY(mu_) = 0;
  // Live requests by (owner, request_id): queued and running ones.
  std::map<std::pair<std::string, std::string>, std::shared_ptr<RequestStream>> live_
      ABSL_GUARDED_BY(mu_);
  // Changed by the engine thread only, under mu_ (so other threads may
  // count it under mu_).
  std::vector<std::unique_ptr<ScheduledSequence>> running_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // Mean service time of retired sequences (exponentially weighted; the
  // first one sets it); 1 s until one has retired.
  double mean_service_seconds_ ABSL_GUARDED_BY(mu_) = 1.0;
  bool service_timed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_activity_ ABSL_GUARDED_BY(mu_) = absl::Now();
};

}  // namespace performer::server
