#include "server/engine/engine.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/decoding/sequence_decoder.h"
#include "core/decoding/state_encoding.h"
#include "core/decoding/status_from_exception.h"
#include "core/decoding/token_ids.h"
#include "server/engine/compute_thread.h"
#include "server/engine/model_runner.h"
#include "server/engine/output_processor.h"
#include "server/engine/prefix_cache.h"
#include "server/engine/scheduler.h"
#include "server/engine/session_store.h"
#include "server/engine/state_signature.h"
#include "server/engine/thread_name.h"
#include "server/engine/work_queue.h"
#include "server/tokenizer/tokenizer.h"

namespace performer::server {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// How often, at most, the engine's thread drops expired sessions: while it
// is idle, and between its rounds of iterations (Begin and Export of a
// session expire the others too).
constexpr absl::Duration kSessionSweepPeriod = absl::Seconds(1);

// The session store's key of `owner`'s session `id`: each caller has its
// own namespace of session ids, as of request ids. Caller names hold no
// "/" (token_file.h); the anonymous caller's ids are their own keys.
std::string SessionKey(const std::string& owner, const std::string& id) {
  return owner.empty() ? id : absl::StrCat(owner, "/", id);
}

// `share` of `total` as a per-caller bound: at least 1; 0 (no bound) for a
// share of 1.
int64_t CallerShare(double share, int64_t total) {
  if (share >= 1.0) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(share * static_cast<double>(total)));
}

RequestLimits LimitsOf(const std::string& model_name, const decoding::DecoderInfo& info,
                       const Tokenizer* tokenizer, const EngineOptions& options) {
  RequestLimits limits;
  limits.model_name = model_name;
  limits.vocab_size = info.vocab_size;
  limits.max_seq_len = info.max_seq_len;
  limits.needs_source = info.needs_source;
  limits.source_vocab_size = info.source_vocab_size;
  limits.max_source_len = info.max_source_len;
  limits.has_tokenizer = tokenizer != nullptr;
  limits.bounds = options.request_bounds;
  return limits;
}

// OutputProcessor::Emit, with a failure ending those sequences; returns
// the tokens emitted. The streams' listeners hear of their tokens as the
// sequences are emitted, and the threads they hand the messages to wake
// once, after the last (WorkQueue::DeferredWakeups).
int64_t Emit(OutputProcessor& output, const std::vector<ScheduledSequence*>& sequences,
             const std::vector<torch::Tensor>& logits) {
  const WorkQueue::DeferredWakeups one_wakeup;
  int64_t emitted = 0;
  const absl::Status status = decoding::StatusFromException("sampling", [&] {
    emitted = output.Emit(sequences, logits);
    return absl::OkStatus();
  });
  if (!status.ok()) {
    for (ScheduledSequence* s : sequences) {
      if (!s->finished()) s->End(FinishReason::kError, status);
    }
  }
  return emitted;
}

}  // namespace

Engine::Engine(std::string model_name, std::unique_ptr<decoding::SequenceDecoder> decoder,
               const Tokenizer* tokenizer, EngineOptions options)
    : model_name_(std::move(model_name)),
      options_(options),
      runner_(std::make_unique<ModelRunner>(std::move(decoder))) {
  limits_ = LimitsOf(model_name_, runner_->info(), tokenizer, options_);
  SchedulerOptions scheduling;
  scheduling.capacity = runner_->info().capacity;
  scheduling.max_queue = options_.max_queue;
  scheduling.prefill_chunk_tokens = options_.prefill_chunk_tokens;
  scheduling.max_prefills_per_step = options_.max_prefills_per_step;
  scheduling.batched_prefill_is_one_forward = options_.batched_prefill_is_one_forward;
  scheduling.max_running_per_caller = CallerShare(options_.caller_slot_share, scheduling.capacity);
  scheduling.max_queued_per_caller = CallerShare(options_.caller_queue_share, scheduling.max_queue);
  scheduler_ = std::make_unique<Scheduler>(scheduling);
  output_ = std::make_unique<OutputProcessor>(tokenizer, runner_->info().max_seq_len,
                                              options_.observer, options_.stream_messages_per_step);
  PrefixCacheOptions prefix = options_.prefix_cache;
  if (!ReusesStates()) prefix.max_bytes = 0;
  prefix_cache_ = std::make_unique<PrefixStateCache>(prefix);
  SessionOptions sessions = options_.sessions;
  if (!ReusesStates()) sessions.max_bytes = 0;
  sessions.max_bytes_per_caller = CallerShare(options_.caller_session_share, sessions.max_bytes);
  sessions.new_session_bytes = runner_->info().state_bytes_per_sequence;
  sessions_ = std::make_unique<SessionStore>(sessions);
  thread_ = std::thread([this] {
    NameThisThread("engine");
    Loop();
  });
}

Engine::~Engine() { Stop(); }

const decoding::DecoderInfo& Engine::info() const { return runner_->info(); }

absl::Status Engine::Validate(const GenerationRequest& request) const {
  return ValidateGenerationRequest(request, limits_);
}

const std::string& Engine::PrefixScope(const ScheduledSequence& s) const {
  static const std::string kShared;
  return options_.prefix_cache.shared_across_callers ? kShared : s.request.owner;
}

bool Engine::ReusesStates() const {
  // A prefix or a session is keyed by decoder tokens alone: an
  // encoder-decoder's state also depends on its source.
  return !runner_->info().needs_source;
}

absl::Status Engine::PrepareResume(ScheduledSequence& s) {
  if (!s.request.session_id.empty()) {
    const std::string session = SessionKey(s.request.owner, s.request.session_id);
    if (!sessions_->enabled()) {
      return absl::FailedPreconditionError(
          ReusesStates() ? std::string("sessions are off on this server (--session_bytes=0)")
                         : absl::StrCat("model ", model_name_,
                                        " is an encoder-decoder: its state depends on the source, "
                                        "so it keeps no sessions"));
    }
    absl::StatusOr<SessionState> content =
        sessions_->Begin(session, absl::Now(), s.request.create_session, s.request.owner);
    if (!content.ok()) {
      const absl::Status& status = content.status();
      if (!absl::IsNotFound(status) && !absl::IsAlreadyExists(status) &&
          !absl::IsFailedPrecondition(status) && !absl::IsResourceExhausted(status)) {
        return status;
      }
      return absl::Status(status.code(),
                          absl::StrCat("session ", s.request.session_id, " of model ", model_name_,
                                       " ", status.message()));
    }
    if (content->state != nullptr) {
      // The turn continues the session: its prompt comes after everything
      // the session has seen, starting with the tokens it has not fed yet.
      const auto fed = static_cast<std::ptrdiff_t>(content->state->position);
      s.history.assign(content->tokens.begin(), content->tokens.begin() + fed);
      std::vector<int64_t> prompt(content->tokens.begin() + fed, content->tokens.end());
      s.pending_tokens = prompt.size();
      prompt.insert(prompt.end(), s.request.prompt.begin(), s.request.prompt.end());
      s.request.prompt = std::move(prompt);
      // The turn needs room for its prompt and one new token; it ends with
      // FINISH_REASON_LENGTH where the model's positions end.
      const int64_t seen = static_cast<int64_t>(content->tokens.size());
      const int64_t added = static_cast<int64_t>(s.request.prompt.size() - s.pending_tokens);
      if (seen + added + 1 > runner_->info().max_seq_len) {
        sessions_->End(session, std::nullopt, absl::Now());
        return absl::OutOfRangeError(absl::StrCat(
            "session ", s.request.session_id, " has seen ", seen, " tokens; with this prompt (",
            added, " tokens) no new token fits in the model's max sequence length ",
            runner_->info().max_seq_len, ": start a new session"));
      }
      auto resume = std::make_shared<ResumePoint>();
      resume->state = content->state;
      s.resume = std::move(resume);
      s.cached_prompt_tokens = static_cast<size_t>(fed);
      return absl::OkStatus();
    }
  }
  // A prompt from the start (no request, or a new session): the prefix cache.
  if (std::optional<PrefixHit> hit = prefix_cache_->Lookup(s.request.prompt, PrefixScope(s))) {
    auto resume = std::make_shared<ResumePoint>();
    resume->state = hit->state;
    resume->logits = hit->logits;
    s.resume = std::move(resume);
    s.prompt_fed = hit->tokens;
    s.cached_prompt_tokens = hit->tokens;
  }
  return absl::OkStatus();
}

absl::Status Engine::Submit(GenerationRequest request, std::shared_ptr<RequestStream> stream) {
  if (absl::Status s = Validate(request); !s.ok()) return s;
  auto sequence = std::make_unique<ScheduledSequence>();
  sequence->request = std::move(request);
  sequence->stream = std::move(stream);
  sequence->accepted = absl::Now();
  if (absl::Status s = PrepareResume(*sequence); !s.ok()) return s;
  const std::string session =
      sequence->request.session_id.empty()
          ? std::string()
          : SessionKey(sequence->request.owner, sequence->request.session_id);
  absl::Status submitted = scheduler_->Submit(std::move(sequence));
  if (!submitted.ok() && !session.empty()) sessions_->End(session, std::nullopt, absl::Now());
  if (absl::IsResourceExhausted(submitted)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model ", model_name_, " is overloaded: ", submitted.message()));
  }
  return submitted;
}

bool Engine::Cancel(const std::string& request_id, const std::string& owner) {
  return scheduler_->Cancel(request_id, owner);
}

bool Engine::CancelAnyOwner(const std::string& request_id) {
  return scheduler_->CancelAnyOwner(request_id);
}

EngineStats Engine::Stats() const {
  const Scheduler::Counts counts = scheduler_->counts();
  EngineStats stats;
  stats.capacity = counts.capacity;
  stats.active = counts.active;
  stats.queued = counts.queued;
  stats.steps = steps_.load();
  stats.generated_tokens = generated_tokens_.load();
  stats.prefix_cache = prefix_cache_->Stats();
  stats.sessions = sessions_->Stats();
  return stats;
}

absl::Time Engine::last_step_time() const { return scheduler_->last_activity(); }

absl::Duration Engine::RetryHint() const { return scheduler_->RetryHint(); }

bool Engine::Healthy(absl::Duration stall) const {
  const Scheduler::Counts counts = scheduler_->counts();
  const bool has_work = counts.queued > 0 || counts.active > 0;
  return !has_work || absl::Now() - last_step_time() < stall;
}

absl::Status Engine::DeleteSession(const std::string& session_id, const std::string& owner) {
  if (!sessions_->enabled()) return absl::FailedPreconditionError("sessions are off");
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  return sessions_->Delete(SessionKey(owner, session_id));
}

absl::StatusOr<ExportedSession> Engine::ExportSession(const std::string& session_id,
                                                      const std::string& owner) {
  if (!sessions_->enabled()) return absl::FailedPreconditionError("sessions are off");
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  return sessions_->Export(SessionKey(owner, session_id), absl::Now(), owner);
}

absl::StatusOr<int64_t> Engine::ImportSession(const std::string& session_id, std::string_view data,
                                              const std::string& owner, bool moved_in) {
  if (!sessions_->enabled()) return absl::FailedPreconditionError("sessions are off");
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  const decoding::DecoderInfo& info = runner_->info();
  absl::StatusOr<std::string_view> state = VerifyState(options_.sessions.signing_key, data);
  if (!state.ok()) return state.status();
  absl::StatusOr<decoding::EncodedState> decoded = decoding::DecodeState(
      *state, options_.sessions.fingerprint, 2 * info.state_bytes_per_sequence);
  if (!decoded.ok()) return decoded.status();
  const int64_t seen = static_cast<int64_t>(decoded->tokens.size());
  if (seen > info.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the state has seen ", seen, " tokens; the model's max_seq_len is ", info.max_seq_len));
  }
  if (absl::Status s = decoding::CheckTokenIds(decoded->tokens, info.vocab_size, "state tokens");
      !s.ok()) {
    return s;
  }
  // CheckSnapshot reads only the pool's shapes, fixed at construction: it
  // may run on this thread while the engine decodes.
  if (absl::Status s = runner_->CheckSnapshot(decoded->snapshot); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("the state does not fit model ", model_name_, ": ", s.message()));
  }
  const int64_t position = decoded->snapshot.position;
  SessionState content;
  content.state = std::make_shared<const StateSnapshot>(std::move(decoded->snapshot));
  content.tokens = std::move(decoded->tokens);
  if (absl::Status s = sessions_->Import(SessionKey(owner, session_id), std::move(content),
                                         absl::Now(), moved_in, owner);
      !s.ok()) {
    return s;
  }
  return position;
}

bool Engine::HoldsSession(const std::string& session_id, const std::string& owner) const {
  return sessions_->enabled() && sessions_->Holds(SessionKey(owner, session_id));
}

absl::StatusOr<ExportedSession> Engine::TakeSession(const std::string& session_id,
                                                    const std::string& owner) {
  if (!sessions_->enabled()) return absl::FailedPreconditionError("sessions are off");
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  return sessions_->Take(SessionKey(owner, session_id), absl::Now(), owner);
}

void Engine::CountSessionPeerUnavailable() { sessions_->CountPeerUnavailable(); }

absl::Status Engine::SpillSessions() { return sessions_->SpillAll(); }

void Engine::BeginDrain() { scheduler_->BeginDrain(); }

bool Engine::draining() const { return scheduler_->draining(); }

bool Engine::WaitIdle(absl::Duration timeout) { return scheduler_->WaitIdle(timeout); }

void Engine::Stop() {
  scheduler_->Stop();
  if (thread_.joinable()) thread_.join();
}

void Engine::Loop() {
  // This thread waits for work; each iteration runs on the process's
  // compute thread (compute_thread.h), where all model work runs.
  absl::Time swept = absl::InfinitePast();
  while (scheduler_->WaitForWork(kSessionSweepPeriod)) {
    if (const absl::Time now = absl::Now(); now - swept >= kSessionSweepPeriod) {
      sessions_->Expire(now);
      swept = now;
    }
    if (!scheduler_->HasWork()) continue;
    if (StallHookReached()) {
      // Test hook: a stuck engine (the heartbeat stops while work waits).
      scheduler_->WaitUntilStopped();
      break;
    }
    // The last line of the error boundary: model calls and sampling report
    // their failures as statuses, so this only catches a defect of the
    // engine itself; the requests in flight end with it, the engine goes on.
    const absl::Status status = decoding::StatusFromException("engine iteration", [&] {
      RunOnComputeThread([&] {
        c10::InferenceMode inference;
        // Iterations run back to back on the compute thread while this
        // engine has work and nothing else waits for the thread: a hand-off
        // per iteration would cost two thread wake-ups per token.
        do {
          RunIteration();
        } while (scheduler_->HasWork() && !ComputeThread::Get().HasWaitingWork() &&
                 !StallHookReached());
      });
      return absl::OkStatus();
    });
    if (!status.ok()) RunOnComputeThread([&] { FailRunning(status); });
  }
  RunOnComputeThread([&] { Shutdown(); });
}

bool Engine::StallHookReached() const {
  return options_.stall_after_steps > 0 && steps_.load() >= options_.stall_after_steps;
}

void Engine::FailRunning(const absl::Status& status) {
  for (const auto& s : scheduler_->running()) {
    if (!s->finished()) s->End(FinishReason::kError, status);
  }
  for (auto& s : scheduler_->Retire()) Retire(*s);
  scheduler_->NoteIterationEnd(absl::Now());
}

void Engine::Shutdown() {
  for (auto& s : scheduler_->TakeAll()) {
    s->End(FinishReason::kError,
           absl::UnavailableError("the server shut down before the request finished"));
    Retire(*s);
  }
}

void Engine::Retire(ScheduledSequence& s) {
  if (!s.request.session_id.empty()) {
    // The session keeps this turn when the request ended well (a stop rule,
    // its length, or the client's cancel) after its whole prompt was fed:
    // the state then holds every token seen but the last one emitted.
    std::optional<SessionState> updated;
    if (s.has_slot && !s.prefilling() && s.finish != FinishReason::kError && s.output != nullptr) {
      const std::vector<int64_t>& seen = s.output->context;
      absl::StatusOr<StateSnapshot> state = runner_->Snapshot(s);
      const int64_t expected = static_cast<int64_t>(seen.size()) - (s.generated > 0 ? 1 : 0);
      if (state.ok() && state->position == expected) {
        // Sessions live in host memory (and spill to disk).
        updated = SessionState{std::make_shared<const StateSnapshot>(state->OnHost()), seen};
      }
    }
    sessions_->End(SessionKey(s.request.owner, s.request.session_id), std::move(updated),
                   absl::Now());
  } else {
    CacheGenerationEnd(s);
  }
  runner_->Release(s);
  output_->Finish(s);
}

void Engine::CacheGenerationEnd(ScheduledSequence& s) {
  // A request from the start that ended well after its whole prompt: the
  // state holds every token it saw but the last one emitted, which is what
  // the next turn of a conversation resending its history starts with.
  if (!prefix_cache_->enabled() || !s.has_slot || s.prefilling() || s.generated == 0 ||
      s.finish == FinishReason::kError || s.output == nullptr || !s.history.empty() ||
      s.pending_tokens != 0) {
    return;
  }
  std::vector<int64_t> fed = s.output->context;
  fed.pop_back();
  const std::string& scope = PrefixScope(s);
  if (fed.size() <= s.request.prompt.size() || !prefix_cache_->Wants(fed, fed.size(), scope)) {
    return;
  }
  absl::StatusOr<StateSnapshot> state = runner_->Snapshot(s);
  if (!state.ok() || state->position != static_cast<int64_t>(fed.size())) return;
  prefix_cache_->Insert(fed, fed.size(),
                        options_.prefix_cache.on_device ? *std::move(state) : state->OnHost(),
                        torch::Tensor(), scope);
}

class Engine::Iteration {
 public:
  explicit Iteration(Engine& engine) : engine_(engine) {}

  void Run() {
    IterationPlan plan = engine_.scheduler_->Schedule(absl::Now());
    for (auto& s : plan.dropped) engine_.Retire(*s);
    FeedPrompts(plan.prefills);
    if (!completed_.empty()) stats_.tokens += Emit(*engine_.output_, completed_, completed_logits_);
    DecodeStep();
    End();
  }

 private:
  // Fresh prompts' first chunks of one length run as one batch (one forward
  // of several prompts costs less than a forward of each: on a CPU per
  // token, on a GPU about as much as one); the other chunks one by one, in
  // the plan's order.
  void FeedPrompts(const std::vector<PrefillChunk>& prefills) {
    std::map<size_t, std::vector<const PrefillChunk*>> batches;  // by chunk length
    for (const PrefillChunk& chunk : prefills) {
      ScheduledSequence& s = *chunk.sequence;
      if (s.finished()) continue;
      if (chunk.first) engine_.output_->Attach(s);
      if (chunk.Batchable()) {
        batches[chunk.end - chunk.begin].push_back(&chunk);
        continue;
      }
      const absl::Time start = absl::Now();
      const absl::StatusOr<torch::Tensor> logits = engine_.runner_->Prefill(chunk);
      ChunkFed(chunk, logits, Seconds(absl::Now() - start));
    }
    for (const auto& [length, chunks] : batches) {
      const absl::Time start = absl::Now();
      const std::vector<absl::StatusOr<torch::Tensor>> logits =
          engine_.runner_->PrefillFirst(chunks);
      const double share = Seconds(absl::Now() - start) / static_cast<double>(chunks.size());
      for (size_t i = 0; i < chunks.size(); ++i) ChunkFed(*chunks[i], logits[i], share);
    }
  }

  // What follows a chunk's forward (`seconds`: its share of the time); a
  // prompt that completes joins those that sample their first token.
  void ChunkFed(const PrefillChunk& chunk, const absl::StatusOr<torch::Tensor>& logits,
                double seconds) {
    ScheduledSequence& s = *chunk.sequence;
    s.prefill_seconds += seconds;
    stats_.prefill_seconds += seconds;
    ++stats_.prefills;
    if (!logits.ok()) {
      s.End(FinishReason::kError, logits.status());
      return;
    }
    s.prompt_fed = chunk.end;
    // A prompt from the start leaves its states in the prefix cache.
    if (s.history.empty() && s.pending_tokens == 0) CachePrefix(s, chunk.end, *logits);
    if (!s.prefilling()) {
      completed_.push_back(&s);
      completed_logits_.push_back(*logits);
    }
  }

  // The state after prompt tokens [0, end), when the cache wants it.
  void CachePrefix(ScheduledSequence& s, size_t end, const torch::Tensor& logits) {
    PrefixStateCache& cache = *engine_.prefix_cache_;
    const std::string& scope = engine_.PrefixScope(s);
    if (!cache.Wants(s.request.prompt, end, scope)) return;
    absl::StatusOr<StateSnapshot> state = engine_.runner_->Snapshot(s);
    if (!state.ok()) return;
    cache.Insert(s.request.prompt, end,
                 engine_.options_.prefix_cache.on_device ? *std::move(state) : state->OnHost(),
                 logits, scope);
  }

  // One batched step over every sequence with a token to feed.
  void DecodeStep() {
    const std::vector<ScheduledSequence*> batch = engine_.scheduler_->DecodeBatch();
    if (batch.empty()) return;
    const absl::Time start = absl::Now();
    stats_.batch_size = static_cast<int64_t>(batch.size());
    absl::StatusOr<torch::Tensor> logits = engine_.runner_->Step(batch);
    engine_.steps_.fetch_add(1);
    if (!logits.ok()) {
      for (ScheduledSequence* s : batch) s->End(FinishReason::kError, logits.status());
    } else {
      stats_.tokens += Emit(*engine_.output_, batch, {*logits});
    }
    stats_.decode_seconds = Seconds(absl::Now() - start);
  }

  // The iteration's metrics, and then the retired sequences leaving the live
  // set and the active count, come before their readers hear of the end: a
  // client that saw its request finish can reuse the id at once, GetModel
  // already shows the slot free, and a scrape counts its steps.
  void End() {
    engine_.generated_tokens_.fetch_add(stats_.tokens);
    const EngineOptions& options = engine_.options_;
    const bool stepped = stats_.batch_size > 0;
    if (options.observer != nullptr && (stats_.prefills > 0 || stepped)) {
      options.observer->OnStep(stats_);
    }
    {
      const WorkQueue::DeferredWakeups one_wakeup;  // as in Emit
      for (auto& s : engine_.scheduler_->Retire()) engine_.Retire(*s);
    }
    if (options.step_delay > absl::ZeroDuration() && stepped) absl::SleepFor(options.step_delay);
    engine_.scheduler_->NoteIterationEnd(absl::Now());
  }

  Engine& engine_;
  EngineStepStats stats_;
  std::vector<ScheduledSequence*> completed_;
  std::vector<torch::Tensor> completed_logits_;
};

void Engine::RunIteration() { Iteration(*this).Run(); }

}  // namespace performer::server
