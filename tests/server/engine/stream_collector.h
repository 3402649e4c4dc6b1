// Test helpers that drive an Engine's RequestStreams to their end, every
// wait bounded.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/engine/engine.h"
#include "server/engine/request_stream.h"

namespace performer::server {

// Waits for a RequestStream to finish and keeps everything it produced.
struct Collected {
  std::vector<int32_t> tokens;
  std::string text;
  StreamSummary summary;
};

// Every wait is bounded: a stream that does not finish within `timeout`
// fails the test and comes back with a DEADLINE_EXCEEDED summary status.
inline Collected WaitFor(const std::shared_ptr<RequestStream>& stream,
                         absl::Duration timeout = absl::Seconds(60)) {
  // Shared with the listener, which may still run after a timed-out wait.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    Collected out;
  };
  auto state = std::make_shared<State>();
  RequestStream* raw = stream.get();
  stream->SetListener([state, raw] {
    std::lock_guard<std::mutex> lock(state->mu);
    RequestStream::Taken taken = raw->Take();
    Collected& out = state->out;
    out.tokens.insert(out.tokens.end(), taken.chunk.token_ids.begin(), taken.chunk.token_ids.end());
    out.text += taken.chunk.text;
    if (taken.summary.has_value()) {
      out.summary = *taken.summary;
      state->done = true;
      state->cv.notify_all();
    }
  });
  std::unique_lock<std::mutex> lock(state->mu);
  if (!state->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] { return state->done; })) {
    ADD_FAILURE() << "the stream did not finish within " << timeout;
    state->out.summary.status = absl::DeadlineExceededError("test wait timed out");
  }
  Collected out = state->out;
  lock.unlock();
  stream->SetListener(nullptr);
  return out;
}

// Polls `condition` until it holds (true) or `timeout` passes (false).
template <typename Condition>
bool WaitUntil(Condition condition, absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time end = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

// Submits `r` and waits for its end. A refused submit fails the test and
// comes back as the summary's status (waiting would never end).
inline Collected RunToEnd(Engine& engine, GenerationRequest r) {
  auto stream = std::make_shared<RequestStream>();
  absl::Status submitted = engine.Submit(std::move(r), stream);
  if (!submitted.ok()) {
    ADD_FAILURE() << "Submit: " << submitted;
    Collected refused;
    refused.summary.status = submitted;
    return refused;
  }
  return WaitFor(stream);
}

}  // namespace performer::server
