// Final encodings of a bidirectional PerformerLM or of an encoder-decoder's
// encoder (Embed), never computed on the caller's thread (the RPC threads):
// requests queue, and the embedder's thread hands whatever is waiting to the
// process's compute thread (server/engine/compute_thread.h) as batches, one
// forward for all inputs of the same length (the model has no padding here,
// so rows of one forward are independent).
// Whatever the model throws becomes the requests' status.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace performer::models {
struct LoadedModel;
}  // namespace performer::models

namespace performer::server {

struct Embedding {
  int64_t dim = 0;
  int64_t tokens = 0;
  std::vector<float> values;  // [tokens, dim] row-major, or [dim] when pooled
};

struct EmbedderOptions {
  int64_t max_batch = 32;    // inputs in one forward
  int64_t max_queue = 1024;  // waiting requests; more get RESOURCE_EXHAUSTED
};

class Embedder {
 public:
  using Done = std::function<void(absl::StatusOr<Embedding>)>;

  explicit Embedder(const models::LoadedModel& model, EmbedderOptions options = {});
  // Stops the thread; requests still waiting get UNAVAILABLE.
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_tokens() const { return max_tokens_; }

  // Validates the input (INVALID_ARGUMENT for an empty input, a token
  // outside the vocabulary or more tokens than the model's max_seq_len),
  // then queues it. `done` is called exactly once: at once for an invalid
  // input or a full queue, else on the embedder's thread. It must not block.
  void EmbedAsync(std::vector<int64_t> tokens, bool mean_pool, Done done);
  // EmbedAsync, waiting for the result.
  absl::StatusOr<Embedding> Embed(const std::vector<int64_t>& tokens, bool mean_pool);

 private:
  struct Pending {
    std::vector<int64_t> tokens;
    bool mean_pool = false;
    Done done;
  };
  void Loop();
  // One forward over inputs of one length; each gets its result.
  void RunBatch(std::vector<Pending>& batch);

  std::unique_ptr<models::LoadedModel> model_;
  const EmbedderOptions options_;
  int64_t vocab_size_ = 0;
  int64_t max_tokens_ = 0;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace performer::server
