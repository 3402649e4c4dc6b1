#include "server/engine/request_stream.h"

#include <algorithm>
#include <utility>

namespace performer::server {

bool RequestStream::Append(const StreamChunk& chunk, int64_t load_tokens_per_message) {
  {
    absl::MutexLock lock(&mu_);
    if (summary_.has_value()) return false;
    const int64_t untaken = static_cast<int64_t>(pending_.token_ids.size());
    if (max_buffered_tokens_ > 0 &&
        untaken + static_cast<int64_t>(chunk.token_ids.size()) > max_buffered_tokens_) {
      return false;
    }
    load_tokens_per_message_ = max_buffered_tokens_ > 0
                                   ? std::min(load_tokens_per_message, max_buffered_tokens_ / 2)
                                   : load_tokens_per_message;
    pending_.token_ids.insert(pending_.token_ids.end(), chunk.token_ids.begin(),
                              chunk.token_ids.end());
    pending_.text += chunk.text;
    pending_.logprobs.insert(pending_.logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
    pending_.session_position = chunk.session_position;
    if (!DueLocked()) return true;
  }
  Notify();
  return true;
}

bool RequestStream::DueLocked() const {
  if (summary_.has_value() && !summary_taken_) return true;
  if (notify_every_tokens_ <= 0) return false;
  const auto waiting = static_cast<int64_t>(pending_.token_ids.size());
  if (waiting == 0) return !pending_.text.empty();
  return first_token_due_ || waiting >= std::max(notify_every_tokens_, load_tokens_per_message_);
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
    waiting = DueLocked();
  }
  if (waiting) Notify();
}

RequestStream::Taken RequestStream::Take() {
  absl::MutexLock lock(&mu_);
  Taken taken;
  if (!DueLocked()) return taken;
  if (!pending_.token_ids.empty()) first_token_due_ = false;
  taken.chunk = std::move(pending_);
  pending_ = StreamChunk();
  if (summary_.has_value() && !summary_taken_) {
    taken.summary = summary_;
    summary_taken_ = true;
  }
  return taken;
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
