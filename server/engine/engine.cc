#include "server/engine/engine.h"

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/decoding/sequence_decoder.h"
#include "core/decoding/status_from_exception.h"
#include "server/engine/compute_thread.h"
#include "server/engine/model_runner.h"
#include "server/engine/output_processor.h"
#include "server/engine/scheduler.h"
#include "server/tokenizer/tokenizer.h"

namespace performer::server {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

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
  limits.max_new_tokens = options.max_new_tokens_limit;
  return limits;
}

// OutputProcessor::Emit, with a failure ending those sequences; returns
// the tokens emitted.
int64_t Emit(OutputProcessor& output, const std::vector<ScheduledSequence*>& sequences,
             const std::vector<torch::Tensor>& logits) {
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
  scheduler_ = std::make_unique<Scheduler>(scheduling);
  output_ =
      std::make_unique<OutputProcessor>(tokenizer, runner_->info().max_seq_len, options_.observer);
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

const decoding::DecoderInfo& Engine::info() const { return runner_->info(); }

absl::Status Engine::Validate(const GenerationRequest& request) const {
  return ValidateGenerationRequest(request, limits_);
}

absl::Status Engine::Submit(GenerationRequest request, std::shared_ptr<RequestStream> stream) {
  if (absl::Status s = Validate(request); !s.ok()) return s;
  auto sequence = std::make_unique<ScheduledSequence>();
  sequence->request = std::move(request);
  sequence->stream = std::move(stream);
  sequence->accepted = absl::Now();
  absl::Status submitted = scheduler_->Submit(std::move(sequence));
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
  return stats;
}

absl::Time Engine::last_step_time() const { return scheduler_->last_activity(); }

absl::Duration Engine::RetryHint() const { return scheduler_->RetryHint(); }

bool Engine::Healthy(absl::Duration stall) const {
  const Scheduler::Counts counts = scheduler_->counts();
  const bool has_work = counts.queued > 0 || counts.active > 0;
  return !has_work || absl::Now() - last_step_time() < stall;
}

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
  while (scheduler_->WaitForWork()) {
    if (options_.stall_after_steps > 0 && steps_.load() >= options_.stall_after_steps) {
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
        RunIteration();
      });
      return absl::OkStatus();
    });
    if (!status.ok()) RunOnComputeThread([&] { FailRunning(status); });
  }
  RunOnComputeThread([&] { Shutdown(); });
}

void Engine::FailRunning(const absl::Status& status) {
  for (const auto& s : scheduler_->running()) {
    if (!s->finished()) s->End(FinishReason::kError, status);
  }
  for (auto& s : scheduler_->Retire()) {
    runner_->Release(*s);
    output_->Finish(*s);
  }
  scheduler_->NoteIterationEnd(absl::Now());
}

void Engine::Shutdown() {
  for (auto& s : scheduler_->TakeAll()) {
    runner_->Release(*s);
    s->End(FinishReason::kError,
           absl::UnavailableError("the server shut down before the request finished"));
    output_->Finish(*s);
  }
}

void Engine::RunIteration() {
  IterationPlan plan = scheduler_->Schedule(absl::Now());
  for (auto& s : plan.dropped) output_->Finish(*s);

  // Prompt chunks; a sequence whose prompt completes samples its first
  // token, all of them in one batch.
  EngineStepStats stats;
  std::vector<ScheduledSequence*> completed;
  std::vector<torch::Tensor> completed_logits;
  for (const PrefillChunk& chunk : plan.prefills) {
    ScheduledSequence& s = *chunk.sequence;
    if (s.finished()) continue;
    if (chunk.first) output_->Attach(s);
    const absl::Time start = absl::Now();
    absl::StatusOr<torch::Tensor> logits = runner_->Prefill(chunk);
    const double seconds = Seconds(absl::Now() - start);
    s.prefill_seconds += seconds;
    stats.prefill_seconds += seconds;
    ++stats.prefills;
    if (!logits.ok()) {
      s.End(FinishReason::kError, logits.status());
      continue;
    }
    s.prompt_fed = chunk.end;
    if (!s.prefilling()) {
      completed.push_back(&s);
      completed_logits.push_back(*logits);
    }
  }
  if (!completed.empty()) stats.tokens += Emit(*output_, completed, completed_logits);

  // One batched step over every sequence with a token to feed.
  const std::vector<ScheduledSequence*> batch = scheduler_->DecodeBatch();
  if (!batch.empty()) {
    const absl::Time start = absl::Now();
    stats.batch_size = static_cast<int64_t>(batch.size());
    absl::StatusOr<torch::Tensor> logits = runner_->Step(batch);
    steps_.fetch_add(1);
    if (!logits.ok()) {
      for (ScheduledSequence* s : batch) s->End(FinishReason::kError, logits.status());
    } else {
      stats.tokens += Emit(*output_, batch, {*logits});
    }
    stats.decode_seconds = Seconds(absl::Now() - start);
  }
  generated_tokens_.fetch_add(stats.tokens);

  // Retired sequences leave the live set and the active count before their
  // readers hear of the end, so a client that saw its request finish can
  // reuse the id at once and GetModel already shows the slot free.
  for (auto& s : scheduler_->Retire()) {
    runner_->Release(*s);
    output_->Finish(*s);
  }
  if (options_.observer != nullptr && (stats.prefills > 0 || stats.batch_size > 0)) {
    options_.observer->OnStep(stats);
  }
  if (options_.step_delay > absl::ZeroDuration() && !batch.empty()) {
    absl::SleepFor(options_.step_delay);
  }
  scheduler_->NoteIterationEnd(absl::Now());
}

}  // namespace performer::server
