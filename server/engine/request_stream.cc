#include "server/engine/request_stream.h"

#include <utility>

namespace performer::server {

bool RequestStream::Append(const StreamChunk& chunk) {
  {
    absl::MutexLock lock(&mu_);
    if (summary_.has_value()) return false;
    const int64_t untaken = static_cast<int64_t>(pending_.token_ids.size());
    if (max_buffered_tokens_ > 0 &&
        untaken + static_cast<int64_t>(chunk.token_ids.size()) > max_buffered_tokens_) {
      return false;
    }
    pending_.token_ids.insert(pending_.token_ids.end(), chunk.token_ids.begin(),
                              chunk.token_ids.end());
    pending_.text += chunk.text;
    pending_.logprobs.insert(pending_.logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
    pending_.session_position = chunk.session_position;
  }
  Notify();
  return true;
}

void RequestStream::Finish(StreamSummary summary) {
  {
    absl::MutexLock lock(&mu_);
    if (summary_.has_value()) return;
    summary_ = std::move(summary);
  }
  Notify();
}

void RequestStream::SetListener(std::function<void()> listener) {
  bool waiting;
  {
    absl::MutexLock lock(&mu_);
    listener_ = std::move(listener);
    waiting = !pending_.empty() || (summary_.has_value() && !summary_taken_);
  }
  if (waiting) Notify();
}

RequestStream::Taken RequestStream::Take() {
  absl::MutexLock lock(&mu_);
  Taken taken;
  taken.chunk = std::move(pending_);
  pending_ = StreamChunk();
  if (summary_.has_value() && !summary_taken_) {
    taken.summary = summary_;
    summary_taken_ = true;
  }
  return taken;
}

bool RequestStream::HasPending() const {
  absl::MutexLock lock(&mu_);
  return !pending_.empty() || (summary_.has_value() && !summary_taken_);
}

void RequestStream::RequestCancel(FinishReason reason) {
  absl::MutexLock lock(&mu_);
  if (cancel_ == FinishReason::kNone) cancel_ = reason;
}

FinishReason RequestStream::cancel_reason() const {
  absl::MutexLock lock(&mu_);
  return cancel_;
}

void RequestStream::Notify() {
  std::function<void()> listener;
  {
    absl::MutexLock lock(&mu_);
    listener = listener_;
  }
  if (listener) listener();
}

}  // namespace performer::server
