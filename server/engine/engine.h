// One model's engine: a thread that runs continuous batching over a
// SequenceDecoder, in three parts:
//   Scheduler        (scheduler.h, no tensors) admits requests into state
//                    slots, picks the prompt chunks of each iteration under
//                    the prefill budget and the batch of each decode step;
//   ModelRunner      (model_runner.h) feeds those chunks and that batch to
//                    the decoder, with every failure as a status;
//   OutputProcessor  (output_processor.h) samples the batch's tokens,
//                    applies the stop rules, detokenizes and streams.
// Each iteration: the scheduler's plan; the prompt chunks (a sequence whose
// prompt completes samples its first token); one batched step over every
// sequence with a token to feed; the finished sequences retire and their
// streams hear of the end.
//
// A request's tokens do not depend on what it is batched with: every row of
// a step is computed independently, the chunking depends only on the
// prompt, and each request samples from its own seeded generator. A model
// error (a status, or an exception the runner caught) ends the requests of
// the call that failed and nothing else.
//
// The recurrent state is reused in two ways (both need a decoder that can
// take its state out, SequenceDecoder::Snapshot, and a decoder-only model):
//   * the prefix-state cache (prefix_cache.h): a prompt resumes from the
//     longest cached state of its prefix, with exactly the tokens of a cold
//     prefill, and every prefilled prompt leaves its states there;
//   * sessions (session_store.h): a request with a session_id continues the
//     session's state, so only its new tokens are prefilled, and leaves the
//     state after its last token for the next turn; sessions can be
//     exported and imported (state_encoding.h) to move to another process.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/engine/engine_observer.h"
#include "server/engine/generation_request.h"
#include "server/engine/request_stream.h"
#include "server/engine/state_reuse_options.h"

namespace performer::decoding {
class SequenceDecoder;
struct DecoderInfo;
}  // namespace performer::decoding

namespace performer::server {

class Tokenizer;
class Scheduler;
class PrefixStateCache;
class SessionStore;
struct ScheduledSequence;
class ModelRunner;
class OutputProcessor;

struct EngineOptions {
  int64_t max_queue = 256;             // waiting requests beyond the slots
  int64_t prefill_chunk_tokens = 512;  // chunk size and per-iteration prefill budget
  // Prefill forwards per iteration, whatever their size, and whether new
  // prompts of one length fed as one forward count once (scheduler.h).
  int64_t max_prefills_per_step = 4;
  bool batched_prefill_is_one_forward = false;
  // > 0: a decode step of n sequences streams messages of at least
  // ceil(n / this) tokens (OutputProcessor), so that the step's messages stay
  // about this many at any number of streams; 0: each stream's own interval.
  int64_t stream_messages_per_step = 0;
  // The most one named caller may hold: this share of the slots at once,
  // and this share of max_queue waiting beyond them (SchedulerOptions'
  // per-caller bounds, at least 1 each), and this share of
  // sessions.max_bytes for its sessions in memory
  // (SessionOptions::max_bytes_per_caller); 1 = no bound.
  double caller_slot_share = 0.75;
  double caller_queue_share = 0.5;
  double caller_session_share = 0.5;
  RequestBounds request_bounds;                      // what one request may carry
  absl::Duration step_delay = absl::ZeroDuration();  // test hook: slows every step
  // Test hook: after this many decode steps the engine blocks until Stop()
  // (a stuck engine, for the liveness check). 0 = never.
  int64_t stall_after_steps = 0;
  EngineObserver* observer = nullptr;  // not owned; may be null
  // interval_tokens must be a multiple of prefill_chunk_tokens.
  PrefixCacheOptions prefix_cache;
  SessionOptions sessions;  // its fingerprint names the model's weights
};

struct EngineStats {
  int64_t capacity = 0;  // state slots
  int64_t active = 0;    // slots in use
  int64_t queued = 0;    // waiting for a slot
  int64_t steps = 0;     // decode steps run so far
  int64_t generated_tokens = 0;
  PrefixCacheStats prefix_cache;
  SessionStats sessions;
};

class Engine {
 public:
  // `tokenizer` may be null (token ids only); it must outlive the engine.
  Engine(std::string model_name, std::unique_ptr<decoding::SequenceDecoder> decoder,
         const Tokenizer* tokenizer, EngineOptions options);
  ~Engine();  // Stop()s
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request (ValidateGenerationRequest against this model),
  // then queues it. RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE
  // when draining, ALREADY_EXISTS for a live request_id of the same owner
  // (GenerationRequest::owner); with a session_id also the session's errors
  // (SessionStore::Begin, RESOURCE_EXHAUSTED past the caller's share of the
  // session memory; FAILED_PRECONDITION where sessions are off or the
  // model cannot keep them, OUT_OF_RANGE when the session's history and the
  // prompt leave no room). On error nothing is written to `stream`.
  absl::Status Submit(GenerationRequest request, std::shared_ptr<RequestStream> stream);
  // Validation alone (what Submit checks first).
  absl::Status Validate(const GenerationRequest& request) const;
  const RequestLimits& limits() const { return limits_; }
  // Ends `owner`'s queued or running request with kCancelled; false if
  // `owner` has no live request with this id.
  bool Cancel(const std::string& request_id, const std::string& owner = "");
  // Ends every owner's live request with this id; false if none.
  bool CancelAnyOwner(const std::string& request_id);

  EngineStats Stats() const;
  const decoding::DecoderInfo& info() const;
  const std::string& model_name() const { return model_name_; }
  // When the engine last finished an iteration (or work arrived at an idle
  // engine): the liveness heartbeat.
  absl::Time last_step_time() const;
  // False when work is waiting or running but no iteration has completed
  // for `stall`: the engine is stuck.
  bool Healthy(absl::Duration stall) const;
  // Expected wait for a slot, for the RESOURCE_EXHAUSTED retry hint.
  absl::Duration RetryHint() const;

  // Sessions (see SessionStore): NOT_FOUND for an unknown session,
  // FAILED_PRECONDITION while a request of it runs or where sessions are
  // off. Import checks the bytes (INVALID_ARGUMENT when corrupted or
  // malformed, FAILED_PRECONDITION for a state of another model) and the
  // state against the model (layout, position, token ids), and returns the
  // session's position; RESOURCE_EXHAUSTED where the session does not fit
  // its caller's share of the session memory. Session ids are scoped to their owner (the caller,
  // GenerationRequest::owner): one caller cannot reach another's session.
  absl::Status DeleteSession(const std::string& session_id, const std::string& owner = "");
  absl::StatusOr<ExportedSession> ExportSession(const std::string& session_id,
                                                const std::string& owner = "");
  // `moved_in`: the bytes came from a peer replica (TakeSession).
  absl::StatusOr<int64_t> ImportSession(const std::string& session_id, std::string_view data,
                                        const std::string& owner = "", bool moved_in = false);
  // Whether this replica holds the session (memory or its spill folder's
  // index): where it does not, the service asks the peers first.
  bool HoldsSession(const std::string& session_id, const std::string& owner = "") const;
  // Moves the session out to a peer (SessionStore::Take).
  absl::StatusOr<ExportedSession> TakeSession(const std::string& session_id,
                                              const std::string& owner = "");
  // A peer held the session but could not hand it over (a miss, counted).
  void CountSessionPeerUnavailable();
  // The model's fingerprint: a session moves only between equal ones.
  const decoding::ModelFingerprint& fingerprint() const { return options_.sessions.fingerprint; }
  // Writes every session to the spill folder (SessionStore::SpillAll).
  absl::Status SpillSessions();

  // Refuse new requests (UNAVAILABLE, DrainingError); running ones go on,
  // queued ones end at the next iteration with the same status.
  void BeginDrain();
  bool draining() const;
  // True once nothing is queued or running (or false at the timeout).
  bool WaitIdle(absl::Duration timeout);
  // Ends every remaining request with UNAVAILABLE and joins the thread.
  void Stop();

 private:
  // One iteration's steps (engine.cc): the scheduler's plan, the prompt
  // chunks, the first tokens of the prompts completed, one decode step, the
  // metrics, the finished sequences retired.
  class Iteration;
  void Loop();
  void RunIteration();
  // Ends every running sequence with `status` and retires it.
  void FailRunning(const absl::Status& status);
  // The stall test hook (EngineOptions::stall_after_steps) has fired.
  bool StallHookReached() const;
  void Shutdown();
  // Where a new sequence starts: its session's state, or the prefix cache's.
  absl::Status PrepareResume(ScheduledSequence& sequence);
  // A sequence leaves the engine: its session keeps its state (when the
  // request ended well after its prompt), its slot is freed, its stream
  // hears of the end.
  void Retire(ScheduledSequence& sequence);
  // Leaves the state after a finished request's prompt and reply (all but
  // its last token) in the prefix cache.
  void CacheGenerationEnd(ScheduledSequence& sequence);
  // Whether this engine's model can reuse states (decoder-only).
  bool ReusesStates() const;
  // The prefix cache's scope of a sequence's prompt: its caller's, unless
  // the cache is shared across callers (PrefixCacheOptions).
  const std::string& PrefixScope(const ScheduledSequence& sequence) const;

  const std::string model_name_;
  const EngineOptions options_;
  std::unique_ptr<ModelRunner> runner_;
  RequestLimits limits_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<OutputProcessor> output_;
  std::unique_ptr<PrefixStateCache> prefix_cache_;
  std::unique_ptr<SessionStore> sessions_;
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> generated_tokens_{0};
  std::thread thread_;
};

}  // namespace performer::server
