// One model's scheduler: a thread that runs continuous batching over a
// SequenceDecoder. Requests wait in a bounded priority queue (FIFO among
// equal priorities) until a state slot is free; each loop iteration
//   1. ends requests that were cancelled, passed their deadline or whose
//      reader fell behind, freeing their slots at once;
//   2. prefills in chunks of prefill_chunk_tokens under a per-iteration
//      budget of the same size and of max_prefills_per_step forwards (at
//      least one chunk per iteration): first the
//      next chunk of prompts already being prefilled (SequenceDecoder::
//      Extend), then waiting requests admitted into free slots (their first
//      chunk in one full forward). A long prompt thus never stalls the
//      running streams for more than one chunk per step;
//   3. runs one batched recurrent step over every sequence that has sampled
//      a token, samples each row with its own sampler and streams it out.
// A request's tokens do not depend on what it is batched with: every row of
// the step is computed independently, the chunking depends only on the
// prompt, and each request samples from its own seeded generator.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/engine/engine_observer.h"
#include "server/engine/generation_request.h"
#include "server/engine/request_stream.h"

namespace performer::decoding {
class SequenceDecoder;
struct DecoderInfo;
}  // namespace performer::decoding

namespace performer::server {

class Tokenizer;

struct EngineOptions {
  int64_t max_queue = 256;             // waiting requests beyond the slots
  int64_t prefill_chunk_tokens = 512;  // chunk size and per-iteration prefill budget
  // Prefill forwards per iteration, whatever their size: each costs a pass
  // over the weights, so many short prompts arriving at once would
  // otherwise stall the running streams as much as one long one.
  int64_t max_prefills_per_step = 4;
  absl::Duration step_delay = absl::ZeroDuration();  // test hook: slows every step
  // Test hook: after this many decode steps the engine blocks until Stop()
  // (a stuck engine, for the liveness check). 0 = never.
  int64_t stall_after_steps = 0;
  EngineObserver* observer = nullptr;  // not owned; may be null
};

struct EngineStats {
  int64_t capacity = 0;  // state slots
  int64_t active = 0;    // slots in use
  int64_t queued = 0;    // waiting for a slot
  int64_t steps = 0;     // decode steps run so far
  int64_t generated_tokens = 0;
};

class Engine {
 public:
  // `tokenizer` may be null (token ids only); it must outlive the engine.
  Engine(std::string model_name, std::unique_ptr<decoding::SequenceDecoder> decoder,
         const Tokenizer* tokenizer, EngineOptions options);
  ~Engine();  // Stop()s
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Checks the request against the model (INVALID_ARGUMENT naming the
  // field), then queues it. RESOURCE_EXHAUSTED when the queue is full,
  // UNAVAILABLE when draining, ALREADY_EXISTS for a live request_id.
  // On error nothing is written to `stream`.
  absl::Status Submit(GenerationRequest request, std::shared_ptr<RequestStream> stream);
  // Validation alone (what Submit checks first).
  absl::Status Validate(const GenerationRequest& request) const;
  // Ends a queued or running request with kCancelled; false if unknown.
  bool Cancel(const std::string& request_id);

  EngineStats Stats() const;
  const decoding::DecoderInfo& info() const;
  const std::string& model_name() const { return model_name_; }
  // When the engine last finished an iteration that did model work (or was
  // created); the liveness heartbeat.
  absl::Time last_step_time() const { return absl::FromUnixNanos(last_step_nanos_.load()); }
  // False when work is waiting or running but no iteration has completed
  // for `stall`: the engine is stuck.
  bool Healthy(absl::Duration stall) const;
  // Expected wait for a slot, for the RESOURCE_EXHAUSTED retry hint.
  absl::Duration RetryHint() const;

  // Refuse new requests (UNAVAILABLE); running and queued ones go on.
  void BeginDrain();
  bool draining() const { return draining_.load(); }
  // True once nothing is queued or running (or false at the timeout).
  bool WaitIdle(absl::Duration timeout);
  // Ends every remaining request with UNAVAILABLE and joins the thread.
  void Stop();

 private:
  struct Sequence;
  struct Waiting;
  void Loop();
  void EraseLive(const std::string& request_id, const std::shared_ptr<RequestStream>& stream);
  void RunIteration(std::unique_lock<std::mutex>& lock);

  const std::string model_name_;
  std::unique_ptr<decoding::SequenceDecoder> decoder_;
  const Tokenizer* tokenizer_;
  const EngineOptions options_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  // Waiting requests by (-priority, arrival number).
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Waiting>> queue_;
  int64_t arrivals_ = 0;
  std::unordered_map<std::string, std::shared_ptr<RequestStream>> live_;  // queued + running
  std::vector<std::unique_ptr<Sequence>> running_;                        // engine thread only
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> steps_{0};
  std::atomic<int64_t> generated_tokens_{0};
  std::atomic<double> mean_request_seconds_{1.0};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> last_step_nanos_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace performer::server
