#include "server/engine/engine.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/decoding/sequence_decoder.h"
#include "core/decoding/token_ids.h"
#include "core/generation/stop_rules.h"
#include "core/generation/token_sampler.h"
#include "server/engine/text_output.h"
#include "server/tokenizer/tokenizer.h"

namespace performer::server {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

struct Engine::Waiting {
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;
  absl::Time accepted;
};

struct Engine::Sequence {
  GenerationRequest request;
  std::shared_ptr<RequestStream> stream;
  decoding::SequenceId id = 0;
  bool has_slot = false;
  std::unique_ptr<generation::TokenSampler> sampler;
  std::unique_ptr<TextOutput> text;  // null without a tokenizer
  std::vector<int64_t> context;      // prompt + generated, for the repetition penalty
  size_t prompt_fed = 0;             // prompt tokens the decoder has consumed
  int64_t last_token = -1;           // sampled, still to be fed
  int64_t generated = 0;
  absl::Time accepted, admitted, first_token, last_token_time;
  double prefill_seconds = 0;  // forwards spent on its prompt
  FinishReason finish = FinishReason::kNone;
  absl::Status status;  // non-OK: the request failed
};

Engine::Engine(std::string model_name, std::unique_ptr<decoding::SequenceDecoder> decoder,
               const Tokenizer* tokenizer, EngineOptions options)
    : model_name_(std::move(model_name)),
      decoder_(std::move(decoder)),
      tokenizer_(tokenizer),
      options_(options) {
  last_step_nanos_ = absl::ToUnixNanos(absl::Now());
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() { Stop(); }

const decoding::DecoderInfo& Engine::info() const { return decoder_->info(); }

absl::Status Engine::Validate(const GenerationRequest& r) const {
  const decoding::DecoderInfo& info = decoder_->info();
  if (r.prompt.empty()) {
    return absl::InvalidArgumentError(
        "prompt is empty: give prompt_text or prompt_tokens (for an encoder-decoder model, or "
        "set the model's decoder_start_token_id)");
  }
  if (absl::Status s = decoding::CheckTokenIds(r.prompt, info.vocab_size, "prompt_tokens"); !s.ok())
    return s;
  if (info.needs_source) {
    if (r.source.empty()) {
      return absl::InvalidArgumentError(
          "source_text / source_tokens: an encoder-decoder model needs a non-empty source");
    }
    if (static_cast<int64_t>(r.source.size()) > info.max_source_len) {
      return absl::InvalidArgumentError(
          absl::StrCat("source_tokens: the source has ", r.source.size(),
                       " tokens; the encoder's max_seq_len is ", info.max_source_len));
    }
    if (absl::Status s = decoding::CheckTokenIds(r.source, info.source_vocab_size, "source_tokens");
        !s.ok()) {
      return s;
    }
  } else if (!r.source.empty()) {
    return absl::InvalidArgumentError(
        "source_text / source_tokens: a decoder-only model takes no source");
  }
  const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
  if (r.sampling.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be at least 1, got ", r.sampling.max_new_tokens));
  }
  if (prompt_len + r.sampling.max_new_tokens > info.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens: the prompt (", prompt_len, " tokens) + max_new_tokens (",
        r.sampling.max_new_tokens, ") exceeds the model's max sequence length ", info.max_seq_len,
        "; at most ", std::max<int64_t>(0, info.max_seq_len - prompt_len),
        " new tokens fit after this prompt"));
  }
  if (absl::Status s = generation::ValidateSamplingParams(r.sampling, info.vocab_size); !s.ok()) {
    return s;
  }
  if (!r.stop_strings.empty()) {
    if (tokenizer_ == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("stop_strings: model ", model_name_,
                                                     " has no tokenizer, so it produces no text"));
    }
    for (size_t i = 0; i < r.stop_strings.size(); ++i) {
      if (r.stop_strings[i].empty()) {
        return absl::InvalidArgumentError(absl::StrCat("stop_strings[", i, "] is empty"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Submit(GenerationRequest request, std::shared_ptr<RequestStream> stream) {
  if (absl::Status s = Validate(request); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stop_) {
    return absl::UnavailableError("the server is shutting down and accepts no new requests");
  }
  if (live_.count(request.request_id) != 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id ", request.request_id, " is already running"));
  }
  if (static_cast<int64_t>(queue_.size()) >= options_.max_queue &&
      active_.load() + static_cast<int64_t>(queue_.size()) >= info().capacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model ", model_name_, " is overloaded: all ", info().capacity,
                     " sequence slots are busy and ", queue_.size(),
                     " requests are waiting (the queue limit); retry later"));
  }
  auto waiting = std::make_unique<Waiting>();
  waiting->accepted = absl::Now();
  // An idle engine's heartbeat clock starts when work arrives, so a long
  // idle period never reads as a stall.
  if (queue_.empty() && active_.load() == 0) {
    last_step_nanos_ = absl::ToUnixNanos(waiting->accepted);
  }
  waiting->stream = stream;
  waiting->request = std::move(request);
  live_[waiting->request.request_id] = stream;
  const int64_t priority = waiting->request.priority;
  queue_.emplace(std::make_pair(-priority, arrivals_++), std::move(waiting));
  wake_.notify_one();
  return absl::OkStatus();
}

bool Engine::Cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(request_id);
  if (it == live_.end()) return false;
  it->second->RequestCancel(FinishReason::kCancelled);
  // The id is free from now on (the engine ends the request within a step),
  // so a client may reuse it as soon as Cancel returns.
  live_.erase(it);
  wake_.notify_one();
  return true;
}

EngineStats Engine::Stats() const {
  EngineStats stats;
  std::lock_guard<std::mutex> lock(mu_);
  stats.capacity = decoder_->info().capacity;
  stats.active = active_.load();
  stats.queued = static_cast<int64_t>(queue_.size());
  stats.steps = steps_.load();
  stats.generated_tokens = generated_tokens_.load();
  return stats;
}

absl::Duration Engine::RetryHint() const {
  const double capacity = static_cast<double>(std::max<int64_t>(1, info().capacity));
  double queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued = static_cast<double>(queue_.size());
  }
  const double seconds = mean_request_seconds_.load() * (queued + 1) / capacity;
  return absl::Seconds(std::clamp(seconds, 0.05, 60.0));
}

bool Engine::Healthy(absl::Duration stall) const {
  bool has_work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    has_work = !queue_.empty() || active_.load() > 0;
  }
  return !has_work || absl::Now() - last_step_time() < stall;
}

void Engine::BeginDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

bool Engine::WaitIdle(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return queue_.empty() && active_.load() == 0; });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    draining_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::EraseLive(const std::string& request_id,
                       const std::shared_ptr<RequestStream>& stream) {
  // A cancelled id may already belong to a newer request.
  auto it = live_.find(request_id);
  if (it != live_.end() && it->second == stream) live_.erase(it);
}

void Engine::Loop() {
  // The decoder's intra-op work runs on LibTorch's pool; this thread only
  // schedules. Tensors are never used for autograd here.
  c10::InferenceMode inference;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !queue_.empty() || !running_.empty(); });
    if (stop_) break;
    if (options_.stall_after_steps > 0 && steps_.load() >= options_.stall_after_steps) {
      // Test hook: a stuck engine (the heartbeat stops while work waits).
      wake_.wait(lock, [&] { return stop_; });
      break;
    }
    RunIteration(lock);
    if (queue_.empty() && running_.empty()) idle_.notify_all();
  }
  // Shutdown: whatever is left ends with UNAVAILABLE.
  std::vector<std::shared_ptr<RequestStream>> left;
  for (auto& [key, waiting] : queue_) left.push_back(waiting->stream);
  queue_.clear();
  for (auto& seq : running_) {
    left.push_back(seq->stream);
    (void)decoder_->Release(seq->id);
  }
  running_.clear();
  live_.clear();
  active_ = 0;
  lock.unlock();
  idle_.notify_all();
  for (auto& stream : left) {
    StreamSummary summary;
    summary.reason = FinishReason::kError;
    summary.status = absl::UnavailableError("the server shut down before the request finished");
    stream->Finish(summary);
  }
}

void Engine::RunIteration(std::unique_lock<std::mutex>& lock) {
  const absl::Time now = absl::Now();
  const int64_t capacity = decoder_->info().capacity;
  const int64_t max_seq_len = decoder_->info().max_seq_len;

  // 1. Queued requests that were cancelled or expired never get a slot;
  //    then admit by priority while slots and the prefill budget last.
  std::vector<std::unique_ptr<Waiting>> dropped, admitted;
  for (auto it = queue_.begin(); it != queue_.end();) {
    const FinishReason cancel = it->second->stream->cancel_reason();
    if (cancel != FinishReason::kNone || it->second->request.deadline <= now) {
      EraseLive(it->second->request.request_id, it->second->stream);
      dropped.push_back(std::move(it->second));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  // The prefill budget goes first to prompts already being prefilled (in
  // admission order), then to new admissions; at least one chunk runs per
  // iteration so that a prompt always progresses. Chunk boundaries depend
  // only on the prompt, never on the budget left.
  const int64_t chunk_tokens = options_.prefill_chunk_tokens;
  int64_t budget = chunk_tokens;
  int64_t chunks = 0;
  std::vector<Sequence*> continuing;
  for (auto& seq : running_) {
    const int64_t left = static_cast<int64_t>(seq->request.prompt.size() - seq->prompt_fed);
    if (left == 0 || seq->finish != FinishReason::kNone) continue;
    const int64_t chunk = std::min(left, chunk_tokens);
    if (chunks > 0 && (chunk > budget || chunks >= options_.max_prefills_per_step)) break;
    budget -= chunk;
    ++chunks;
    continuing.push_back(seq.get());
  }
  while (!queue_.empty() && static_cast<int64_t>(running_.size() + admitted.size()) < capacity) {
    auto it = queue_.begin();
    const int64_t chunk =
        std::min<int64_t>(static_cast<int64_t>(it->second->request.prompt.size()), chunk_tokens);
    if (chunks > 0 && (chunk > budget || chunks >= options_.max_prefills_per_step)) break;
    budget -= chunk;
    ++chunks;
    admitted.push_back(std::move(it->second));
    queue_.erase(it);
  }
  // Counted as active from here, so WaitIdle never sees them in neither place.
  active_ = static_cast<int64_t>(running_.size() + admitted.size());
  lock.unlock();

  std::vector<std::unique_ptr<Sequence>> finished;
  EngineStepStats step_stats;
  auto summarize = [&](const GenerationRequest& request, absl::Time accepted,
                       absl::Time first_token, absl::Time admitted_at, FinishReason reason,
                       absl::Status status, int64_t generated) {
    const absl::Time end = absl::Now();
    StreamSummary summary;
    summary.reason = reason;
    summary.status = std::move(status);
    summary.prompt_tokens = static_cast<int64_t>(request.prompt.size() + request.source.size());
    summary.generated_tokens = generated;
    summary.queue_seconds =
        Seconds((admitted_at == absl::InfinitePast() ? end : admitted_at) - accepted);
    summary.time_to_first_token_seconds =
        first_token == absl::InfinitePast() ? 0.0 : Seconds(first_token - accepted);
    summary.total_seconds = Seconds(end - accepted);
    return summary;
  };
  for (auto& w : dropped) {
    const FinishReason cancel = w->stream->cancel_reason();
    const bool deadline = cancel == FinishReason::kNone || cancel == FinishReason::kDeadline;
    StreamSummary summary = summarize(
        w->request, w->accepted, absl::InfinitePast(), absl::InfinitePast(),
        deadline ? FinishReason::kDeadline : cancel,
        deadline ? absl::DeadlineExceededError("the deadline passed while the request was queued")
                 : absl::OkStatus(),
        0);
    if (options_.observer != nullptr) options_.observer->OnFinished(summary, -1.0);
    w->stream->Finish(std::move(summary));
  }

  // Ends a running sequence (its slot is freed below).
  auto end_sequence = [&](Sequence& seq, FinishReason reason, absl::Status status) {
    seq.finish = reason;
    seq.status = std::move(status);
  };
  // Ends a sequence whose reader asked for it (Cancel RPC, client cancel or
  // disconnect, the RPC's deadline); true if it did. A cancel is a normal
  // end (the stream says why); a passed deadline is DEADLINE_EXCEEDED.
  auto end_if_cancelled = [&](Sequence& seq) {
    const FinishReason cancel = seq.stream->cancel_reason();
    if (cancel == FinishReason::kNone) return false;
    end_sequence(seq, cancel,
                 cancel == FinishReason::kDeadline
                     ? absl::DeadlineExceededError("the request's deadline passed")
                     : absl::OkStatus());
    return true;
  };
  // Emits one sampled token; decides whether the sequence is done.
  auto emit = [&](Sequence& seq, const torch::Tensor& logits, int64_t token) {
    const absl::Time t = absl::Now();
    if (seq.generated == 0) {
      seq.first_token = t;
    } else if (options_.observer != nullptr) {
      options_.observer->OnInterTokenGap(Seconds(t - seq.last_token_time));
    }
    seq.last_token_time = t;
    ++step_stats.tokens;
    seq.context.push_back(token);
    ++seq.generated;
    StreamChunk chunk;
    chunk.token_ids.push_back(static_cast<int32_t>(token));
    if (seq.request.return_logprobs) {
      chunk.logprobs.push_back(
          torch::log_softmax(logits.to(torch::kDouble), -1)[token].item<double>());
    }
    generation::FinishReason core =
        generation::CheckStop(seq.request.sampling, token, seq.generated,
                              static_cast<int64_t>(seq.context.size()) - 1, max_seq_len);
    FinishReason reason = core == generation::FinishReason::kNone        ? FinishReason::kNone
                          : core == generation::FinishReason::kEos       ? FinishReason::kEos
                          : core == generation::FinishReason::kStopToken ? FinishReason::kStopToken
                                                                         : FinishReason::kLength;
    if (seq.text != nullptr) {
      bool stopped = false;
      chunk.text = seq.text->Push(static_cast<int32_t>(token), &stopped);
      if (stopped) reason = FinishReason::kStopString;
      if (reason != FinishReason::kNone && !stopped) chunk.text += seq.text->Flush();
    }
    if (!seq.stream->Append(chunk)) {
      end_sequence(seq, FinishReason::kError,
                   absl::ResourceExhaustedError(absl::StrCat(
                       "the client read too slowly: more than ", seq.request.max_buffered_tokens,
                       " generated tokens were waiting to be sent")));
      return;
    }
    generated_tokens_.fetch_add(1);
    if (reason != FinishReason::kNone) {
      end_sequence(seq, reason, absl::OkStatus());
    } else {
      seq.last_token = token;
    }
  };

  // 2. Cancellations, deadlines and slow readers of running sequences.
  for (auto& seq : running_) {
    if (!end_if_cancelled(*seq) && seq->request.deadline <= now) {
      end_sequence(*seq, FinishReason::kDeadline,
                   absl::DeadlineExceededError("the request's deadline passed"));
    }
  }

  // 3. Prefill: the next chunk of prompts being prefilled (Extend), then new
  //    admissions (a slot and the prompt's first chunk in one full forward).
  //    A sequence whose prompt is complete samples its first token.
  for (Sequence* seq : continuing) {
    if (seq->finish != FinishReason::kNone) continue;
    const size_t end =
        std::min(seq->request.prompt.size(), seq->prompt_fed + static_cast<size_t>(chunk_tokens));
    std::vector<int64_t> chunk(seq->request.prompt.begin() + seq->prompt_fed,
                               seq->request.prompt.begin() + end);
    const absl::Time start = absl::Now();
    absl::StatusOr<torch::Tensor> logits = decoder_->Extend(seq->id, chunk);
    const double seconds = Seconds(absl::Now() - start);
    seq->prefill_seconds += seconds;
    step_stats.prefill_seconds += seconds;
    ++step_stats.prefills;
    seq->prompt_fed = end;
    if (!logits.ok()) {
      end_sequence(*seq, FinishReason::kError, logits.status());
    } else if (seq->prompt_fed == seq->request.prompt.size()) {
      emit(*seq, *logits, seq->sampler->Sample(*logits, seq->context));
    }
  }
  for (auto& w : admitted) {
    auto seq = std::make_unique<Sequence>();
    seq->request = std::move(w->request);
    seq->stream = std::move(w->stream);
    seq->accepted = w->accepted;
    seq->admitted = absl::Now();
    seq->first_token = absl::InfinitePast();
    seq->sampler = std::make_unique<generation::TokenSampler>(seq->request.sampling);
    if (tokenizer_ != nullptr) {
      seq->text = std::make_unique<TextOutput>(*tokenizer_, seq->request.stop_strings);
    }
    seq->context = seq->request.prompt;
    absl::StatusOr<decoding::SequenceId> id = decoder_->Create();
    if (!id.ok()) {
      end_sequence(*seq, FinishReason::kError, id.status());
      running_.push_back(std::move(seq));
      continue;
    }
    seq->id = *id;
    seq->has_slot = true;
    decoding::PrefillRequest prefill;
    const size_t chunk = std::min<size_t>(seq->request.prompt.size(),
                                          static_cast<size_t>(options_.prefill_chunk_tokens));
    prefill.prompt.assign(seq->request.prompt.begin(), seq->request.prompt.begin() + chunk);
    prefill.source = seq->request.source;
    const absl::Time start = absl::Now();
    absl::StatusOr<torch::Tensor> logits = decoder_->Prefill(seq->id, prefill);
    const double seconds = Seconds(absl::Now() - start);
    seq->prefill_seconds += seconds;
    step_stats.prefill_seconds += seconds;
    ++step_stats.prefills;
    seq->prompt_fed = chunk;
    running_.push_back(std::move(seq));
    Sequence& s = *running_.back();
    if (!logits.ok()) {
      end_sequence(s, FinishReason::kError, logits.status());
    } else if (s.prompt_fed == s.request.prompt.size() && s.finish == FinishReason::kNone) {
      emit(s, *logits, s.sampler->Sample(*logits, s.context));
    }
  }

  active_ = static_cast<int64_t>(running_.size());

  // 4. One batched step over every sequence that has sampled a token.
  std::vector<decoding::SequenceId> ids;
  std::vector<int64_t> tokens;
  std::vector<Sequence*> stepped;
  for (auto& seq : running_) {
    if (seq->finish != FinishReason::kNone) continue;
    // Cancelled between admission and now: no point feeding it.
    if (seq->stream->cancel_reason() != FinishReason::kNone) continue;
    // Still prefilling: its next chunk runs in a later iteration.
    if (seq->prompt_fed < seq->request.prompt.size()) continue;
    // Admitted in this iteration: its first token was just sampled from the
    // prefill; it joins the step like every other sequence.
    ids.push_back(seq->id);
    tokens.push_back(seq->last_token);
    stepped.push_back(seq.get());
  }
  if (!ids.empty()) {
    const absl::Time step_start = absl::Now();
    step_stats.batch_size = static_cast<int64_t>(ids.size());
    absl::StatusOr<torch::Tensor> logits = decoder_->Step(ids, tokens);
    steps_.fetch_add(1);
    if (!logits.ok()) {
      for (Sequence* seq : stepped) {
        end_sequence(
            *seq, FinishReason::kError,
            absl::InternalError(absl::StrCat("decode step failed: ", logits.status().ToString())));
      }
    } else {
      const torch::Tensor rows = logits->to(torch::kFloat).contiguous();
      for (size_t i = 0; i < stepped.size(); ++i) {
        Sequence& seq = *stepped[i];
        const torch::Tensor row = rows[static_cast<int64_t>(i)];
        emit(seq, row, seq.sampler->Sample(row, seq.context));
      }
    }
    step_stats.decode_seconds = Seconds(absl::Now() - step_start);
  }

  // 5. Free the slots of finished sequences. Their ids leave live_ and the
  //    active count drops before their readers hear of the end, so a client
  //    that saw its request finish can reuse the id at once and GetModel
  //    already shows the slot free.
  for (auto& seq : running_) {
    // A cancel that arrived during this iteration.
    if (seq->finish == FinishReason::kNone) end_if_cancelled(*seq);
    if (seq->finish == FinishReason::kNone) continue;
    if (seq->has_slot) (void)decoder_->Release(seq->id);
    const double seconds = Seconds(absl::Now() - seq->accepted);
    mean_request_seconds_ = 0.9 * mean_request_seconds_.load() + 0.1 * seconds;
    finished.push_back(std::move(seq));
  }
  running_.erase(std::remove(running_.begin(), running_.end(), nullptr), running_.end());
  lock.lock();
  for (auto& seq : finished) EraseLive(seq->request.request_id, seq->stream);
  active_ = static_cast<int64_t>(running_.size());
  lock.unlock();
  for (auto& seq : finished) {
    StreamSummary summary = summarize(seq->request, seq->accepted, seq->first_token, seq->admitted,
                                      seq->finish, seq->status, seq->generated);
    if (options_.observer != nullptr) {
      options_.observer->OnFinished(summary, seq->has_slot ? seq->prefill_seconds : -1.0);
    }
    seq->stream->Finish(std::move(summary));
  }
  if (options_.observer != nullptr && (step_stats.prefills > 0 || step_stats.batch_size > 0)) {
    options_.observer->OnStep(step_stats);
  }

  if (options_.step_delay > absl::ZeroDuration() && !stepped.empty()) {
    absl::SleepFor(options_.step_delay);
  }
  last_step_nanos_ = absl::ToUnixNanos(absl::Now());
  lock.lock();
}

}  // namespace performer::server
