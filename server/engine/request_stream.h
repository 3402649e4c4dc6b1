// The hand-off between the engine thread (producer) and one RPC (consumer):
// new tokens, text and log-probabilities accumulate here until the RPC takes
// them, so a reader that falls behind gets fewer, larger messages and never
// blocks the batch. Past max_buffered_tokens untaken tokens, Append refuses
// and the engine ends the request (slow reader). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/generation_request.h"

namespace performer::server {

struct StreamChunk {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<float> logprobs;  // one per token when return_logprobs
  // A session turn: tokens the session has seen after this chunk (its
  // history, the prompt, the tokens generated so far); 0 without a session.
  int64_t session_position = 0;
  bool empty() const { return token_ids.empty() && text.empty(); }
};

struct StreamSummary {
  FinishReason reason = FinishReason::kNone;
  absl::Status status;  // OK, or why the request failed
  // Everything the model conditioned on before the first new token: the
  // prompt, and a session turn's history.
  int64_t prompt_tokens = 0;
  // Of prompt_tokens, served from a saved state: the prefix cache's hit, or
  // the session's history.
  int64_t cached_prompt_tokens = 0;
  int64_t session_position = 0;  // as StreamChunk's, at the end
  int64_t generated_tokens = 0;
  double queue_seconds = 0;
  double time_to_first_token_seconds = 0;
  double total_seconds = 0;
};

class RequestStream {
 public:
  // max_buffered_tokens: 0 = unbounded. notify_every_tokens: the listener
  // hears of appended tokens once that many wait untaken (of the request's
  // first token at once), so that a streamed answer goes out in messages of
  // that many tokens; 0 = only of the finish (an answer sent whole).
  explicit RequestStream(int64_t max_buffered_tokens = 0, int64_t notify_every_tokens = 1)
      : max_buffered_tokens_(max_buffered_tokens), notify_every_tokens_(notify_every_tokens) {}

  // Engine side. Append returns false (and keeps nothing) when the untaken
  // tokens would exceed the bound. Finish is always accepted, once.
  // `load_tokens_per_message` raises notify_every_tokens from this append on
  // while the engine is busy (EngineOptions::stream_messages_per_step; 1:
  // no change), at most to half the bound, so that the reader has a step's
  // slack before the bound; a whole answer (0) is unaffected.
  bool Append(const StreamChunk& chunk, int64_t load_tokens_per_message = 1);
  void Finish(StreamSummary summary);

  // Consumer side. The listener is called, outside the lock, after an
  // Append that leaves enough tokens waiting (notify_every_tokens) and after
  // Finish (and once at once if that much is already waiting); it must not
  // block. Take() removes everything buffered once that much waits (else
  // nothing: a consumer that pumps after its own write takes no short
  // message); `summary` is set once the engine has finished the request and
  // every chunk has been taken.
  void SetListener(std::function<void()> listener);
  struct Taken {
    StreamChunk chunk;
    std::optional<StreamSummary> summary;
  };
  Taken Take();

  // Either side: asks the engine to end the request (it does within a step).
  void RequestCancel(FinishReason reason = FinishReason::kCancelled);
  // kNone when no cancel was requested.
  FinishReason cancel_reason() const;

 private:
  void Notify();
  // Whether the listener should hear of what waits now.
  bool DueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int64_t max_buffered_tokens_;
  const int64_t notify_every_tokens_;
  // Taken by the engine thread and by the consumer; never held while the
  // listener runs.
  mutable absl::Mutex mu_;
  StreamChunk pending_ ABSL_GUARDED_BY(mu_);
  std::optional<StreamSummary> summary_ ABSL_GUARDED_BY(mu_);
  bool summary_taken_ ABSL_GUARDED_BY(mu_) = false;
  bool first_token_due_ ABSL_GUARDED_BY(mu_) = true;          // no token was taken yet
  int64_t load_tokens_per_message_ ABSL_GUARDED_BY(mu_) = 1;  // the last Append's
  FinishReason cancel_ ABSL_GUARDED_BY(mu_) = FinishReason::kNone;
  std::function<void()> listener_ ABSL_GUARDED_BY(mu_);
};

}  // namespace performer::server
