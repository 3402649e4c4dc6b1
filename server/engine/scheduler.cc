#include "server/engine/scheduler.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "server/engine/draining.h"

namespace performer::server {

using generation::FinishReason;

bool ScheduledSequence::EndIfCancelled(bool deadline_passed) {
  const FinishReason cancel = stream->cancel_reason();
  if (cancel == FinishReason::kDeadline || (cancel == FinishReason::kNone && deadline_passed)) {
    End(FinishReason::kDeadline,
        absl::DeadlineExceededError(admitted == absl::InfinitePast()
                                        ? "the deadline passed while the request was queued"
                                        : "the request's deadline passed"));
    return true;
  }
  if (cancel == FinishReason::kNone) return false;
  End(cancel);
  return true;
}

bool PrefillChunk::Batchable() const {
  return first && sequence->resume == nullptr && sequence->request.source.empty();
}

Scheduler::Scheduler(SchedulerOptions options) : options_(options) {}

absl::Status Scheduler::Submit(std::unique_ptr<ScheduledSequence> sequence) {
  absl::MutexLock lock(&mu_);
  if (draining_ || stopped_) {
    return DrainingError();
  }
  const std::string& id = sequence->request.request_id;
  const auto key = std::make_pair(sequence->request.owner, id);
  if (live_.count(key) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("request_id ", id, " is already running"));
  }
  const int64_t queued = static_cast<int64_t>(queue_.size());
  const int64_t active = static_cast<int64_t>(running_.size());
  // The queue holds max_queue requests beyond the free slots: a burst that
  // arrives before the next iteration admits anything is not refused
  // while slots are free.
  const int64_t free_slots = std::max<int64_t>(0, options_.capacity - active);
  if (queued >= options_.max_queue + free_slots) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", options_.capacity, " sequence slots are busy and ", queued,
                     " requests are waiting (the queue limit); retry later"));
  }
  if (absl::Status s = CheckCallerShareLocked(sequence->request.owner); !s.ok()) return s;
  // An idle scheduler's clock starts when work arrives, so a long idle
  // period never reads as a stall.
  if (queue_.empty() && active == 0) last_activity_ = sequence->accepted;
  live_[key] = sequence->stream;
  const int64_t priority = sequence->request.priority;
  queue_.emplace(std::make_pair(-priority, arrivals_++), std::move(sequence));
  return absl::OkStatus();
}

size_t Scheduler::ChunkEnd(const ScheduledSequence& s) const {
  const auto chunk = static_cast<size_t>(options_.prefill_chunk_tokens);
  return std::min(s.request.prompt.size(), (s.prompt_fed / chunk + 1) * chunk);
}

absl::Status Scheduler::CheckCallerShareLocked(const std::string& owner) const {
  if (owner.empty() || options_.max_queued_per_caller <= 0) return absl::OkStatus();
  const int64_t running_bound =
      options_.max_running_per_caller > 0 ? options_.max_running_per_caller : options_.capacity;
  int64_t mine = 0;
  for (const auto& entry : queue_) mine += entry.second->request.owner == owner ? 1 : 0;
  for (const auto& s : running_) mine += s->request.owner == owner ? 1 : 0;
  if (mine < running_bound + options_.max_queued_per_caller) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("caller ", owner, " has ", mine,
                   " requests running or waiting, its share of the ", options_.capacity,
                   " slots and the queue (--caller_slot_share, --caller_queue_share); "
                   "retry later"));
}

bool Scheduler::Cancel(const std::string& request_id, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto it = live_.find(std::make_pair(owner, request_id));
  if (it == live_.end()) return false;
  it->second->RequestCancel(FinishReason::kCancelled);
  // The id is free from now on (the engine ends the request within an
  // iteration), so a client may reuse it as soon as Cancel returns.
  live_.erase(it);
  return true;
}

bool Scheduler::CancelAnyOwner(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  bool cancelled = false;
  for (auto it = live_.begin(); it != live_.end();) {
    if (it->first.second != request_id) {
      ++it;
      continue;
    }
    it->second->RequestCancel(FinishReason::kCancelled);
    it = live_.erase(it);
    cancelled = true;
  }
  return cancelled;
}

bool Scheduler::WorkOrStopLocked() const {
  return stopped_ || !queue_.empty() || !running_.empty();
}

bool Scheduler::IdleLocked() const { return queue_.empty() && running_.empty(); }

bool Scheduler::WaitForWork(absl::Duration max_wait) {
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(this, &Scheduler::WorkOrStopLocked), max_wait);
  return !stopped_;
}

bool Scheduler::HasWork() const {
  absl::MutexLock lock(&mu_);
  return !stopped_ && (!queue_.empty() || !running_.empty());
}

void Scheduler::DropLeavingLocked(IterationPlan& plan, absl::Time now) {
  // While draining, the queued requests that free slots await are served;
  // every other one leaves at once with the drain's UNAVAILABLE, so that
  // its client retries elsewhere rather than wait out --drain_timeout.
  int64_t free_slots = options_.capacity - static_cast<int64_t>(running_.size());
  for (auto it = queue_.begin(); it != queue_.end();) {
    ScheduledSequence& s = *it->second;
    bool leaves = s.EndIfCancelled(s.request.deadline <= now);
    if (!leaves && draining_ && !s.finished()) {
      if (free_slots > 0) {
        --free_slots;
      } else {
        s.End(FinishReason::kError, DrainingError());
        leaves = true;
      }
    }
    if (leaves) {
      auto live = live_.find(std::make_pair(s.request.owner, s.request.request_id));
      if (live != live_.end() && live->second == s.stream) live_.erase(live);
      plan.dropped.push_back(std::move(it->second));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

IterationPlan Scheduler::Schedule(absl::Time now) {
  IterationPlan plan;
  absl::MutexLock lock(&mu_);
  // 1. Cancelled and expired requests: queued ones leave without a slot,
  //    running ones end (their slots are freed by Retire).
  DropLeavingLocked(plan, now);
  for (auto& s : running_) {
    if (!s->finished()) s->EndIfCancelled(s->request.deadline <= now);
  }

  // 2. Prefill chunks under the budget.
  const int64_t chunk_tokens = options_.prefill_chunk_tokens;
  int64_t budget = chunk_tokens;
  int64_t forwards = 0;
  std::set<int64_t> batched_lengths;  // of the Batchable chunks planned
  // Adds `chunk` to the plan if it fits the budget (the first always does).
  const auto add = [&](const PrefillChunk& chunk) {
    const auto tokens = static_cast<int64_t>(chunk.end - chunk.begin);
    const bool joins = options_.batched_prefill_is_one_forward && chunk.Batchable() &&
                       batched_lengths.count(tokens) > 0;
    if (!plan.prefills.empty() &&
        (tokens > budget || (!joins && forwards >= options_.max_prefills_per_step))) {
      return false;
    }
    budget -= tokens;
    if (!joins) ++forwards;
    if (chunk.Batchable()) batched_lengths.insert(tokens);
    plan.prefills.push_back(chunk);
    return true;
  };
  for (auto& s : running_) {
    if (s->finished() || !s->prefilling()) continue;
    if (!add({s.get(), s->prompt_fed, ChunkEnd(*s), /*first=*/false})) break;
  }
  // 3. New sequences into the free slots, in queue order, skipping those
  //    of a caller that holds its share of the slots already.
  std::unordered_map<std::string, int64_t> held;
  if (options_.max_running_per_caller > 0) {
    for (const auto& s : running_) ++held[s->request.owner];
  }
  for (auto it = queue_.begin();
       it != queue_.end() && static_cast<int64_t>(running_.size()) < options_.capacity;) {
    ScheduledSequence* s = it->second.get();
    const std::string& owner = s->request.owner;
    if (options_.max_running_per_caller > 0 && !owner.empty() &&
        held[owner] >= options_.max_running_per_caller) {
      ++it;
      continue;
    }
    if (!add({s, s->prompt_fed, ChunkEnd(*s), /*first=*/true})) break;
    s->admitted = now;
    ++held[owner];
    running_.push_back(std::move(it->second));
    it = queue_.erase(it);
  }
  return plan;
}

std::vector<ScheduledSequence*> Scheduler::DecodeBatch() const {
  std::vector<ScheduledSequence*> batch;
  for (const auto& s : running_) {
    if (s->finished() || s->prefilling() || !s->has_slot) continue;
    // Cancelled since Schedule: no point feeding it.
    if (s->stream->cancel_reason() != FinishReason::kNone) continue;
    batch.push_back(s.get());
  }
  return batch;
}

std::vector<std::unique_ptr<ScheduledSequence>> Scheduler::Retire(absl::Time now) {
  std::vector<std::unique_ptr<ScheduledSequence>> retired;
  absl::MutexLock lock(&mu_);
  for (auto& s : running_) {
    if (!s->finished() && !s->EndIfCancelled()) continue;
    NoteRetiredLocked(*s, now);
    retired.push_back(std::move(s));
  }
  running_.erase(std::remove(running_.begin(), running_.end(), nullptr), running_.end());
  return retired;
}

void Scheduler::NoteRetiredLocked(const ScheduledSequence& s, absl::Time now) {
  auto live = live_.find(std::make_pair(s.request.owner, s.request.request_id));
  if (live != live_.end() && live->second == s.stream) live_.erase(live);
  if (s.admitted == absl::InfinitePast()) return;  // never held a slot
  const double seconds = std::max(0.0, absl::ToDoubleSeconds(now - s.admitted));
  mean_service_seconds_ = service_timed_ ? 0.9 * mean_service_seconds_ + 0.1 * seconds : seconds;
  service_timed_ = true;
}

std::vector<std::unique_ptr<ScheduledSequence>> Scheduler::TakeAll() {
  std::vector<std::unique_ptr<ScheduledSequence>> all;
  absl::MutexLock lock(&mu_);
  for (auto& [key, s] : queue_) all.push_back(std::move(s));
  queue_.clear();
  for (auto& s : running_) all.push_back(std::move(s));
  running_.clear();
  live_.clear();
  return all;
}

void Scheduler::BeginDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool Scheduler::draining() const {
  absl::MutexLock lock(&mu_);
  return draining_;
}

void Scheduler::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
  draining_ = true;
}

void Scheduler::WaitUntilStopped() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

bool Scheduler::WaitIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &Scheduler::IdleLocked), timeout);
}

Scheduler::Counts Scheduler::counts() const {
  absl::MutexLock lock(&mu_);
  return {options_.capacity, static_cast<int64_t>(running_.size()),
          static_cast<int64_t>(queue_.size())};
}

absl::Duration Scheduler::RetryHint() const {
  absl::MutexLock lock(&mu_);
  const double capacity = static_cast<double>(std::max<int64_t>(1, options_.capacity));
  return absl::Seconds(std::clamp(mean_service_seconds_ / capacity, 0.01, 60.0));
}

absl::Time Scheduler::last_activity() const {
  absl::MutexLock lock(&mu_);
  return last_activity_;
}

void Scheduler::NoteIterationEnd(absl::Time when) {
  absl::MutexLock lock(&mu_);
  last_activity_ = when;
}

}  // namespace performer::server
