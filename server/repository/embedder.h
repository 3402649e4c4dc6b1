// Final encodings of a bidirectional PerformerLM or of an encoder-decoder's
// encoder (Embed). Calls are serialized per model: they are short full
// forwards, and the decode engine keeps LibTorch's threads busy anyway.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
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

class Embedder {
 public:
  explicit Embedder(const models::LoadedModel& model);
  ~Embedder();
  int64_t vocab_size() const { return vocab_size_; }
  int64_t max_tokens() const { return max_tokens_; }
  // INVALID_ARGUMENT for an empty input, a token outside the vocabulary or
  // more tokens than the model's max_seq_len.
  absl::StatusOr<Embedding> Embed(const std::vector<int64_t>& tokens, bool mean_pool);

 private:
  std::unique_ptr<models::LoadedModel> model_;
  int64_t vocab_size_ = 0;
  int64_t max_tokens_ = 0;
  std::mutex mu_;
};

}  // namespace performer::server
