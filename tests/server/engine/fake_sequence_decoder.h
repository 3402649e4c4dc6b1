// A SequenceDecoder for engine tests: no model, a deterministic next token
// (the last token fed + 1, modulo the vocabulary) so that expected outputs
// are known, a record of every call, and failures on demand (a status, a
// thrown c10::Error or an out-of-memory error) at the n-th call of a kind.
#pragma once

#include <c10/util/Exception.h>
#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/decoding/sequence_decoder.h"

namespace performer::server::fake {

enum class FakeFailure { kNone, kStatus, kThrow, kOutOfMemory };

struct FakeDecoderCalls {
  std::vector<int64_t> prefill_tokens;  // tokens of each Prefill
  std::vector<int64_t> extend_tokens;   // tokens of each Extend
  std::vector<int64_t> step_batches;    // rows of each Step
  int64_t creates = 0;
  int64_t releases = 0;
};

class FakeSequenceDecoder : public decoding::SequenceDecoder {
 public:
  FakeSequenceDecoder(int64_t vocab, int64_t capacity, int64_t max_seq_len = 1 << 20) {
    info_.model_class = "Fake";
    info_.vocab_size = vocab;
    info_.max_seq_len = max_seq_len;
    info_.capacity = capacity;
    info_.state_bytes_per_sequence = 8;
  }

  // The `nth` (1-based) call of `kind` ("prefill", "extend", "step") fails.
  void FailAt(const std::string& kind, int64_t nth, FakeFailure failure) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_[kind] = {nth, failure};
  }
  FakeDecoderCalls calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

  const decoding::DecoderInfo& info() const override { return info_; }
  absl::StatusOr<decoding::SequenceId> Create() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int64_t>(last_.size()) >= info_.capacity) {
      return absl::ResourceExhaustedError("fake: no free slot");
    }
    ++calls_.creates;
    const decoding::SequenceId id = next_id_++;
    last_[id] = -1;
    return id;
  }
  absl::StatusOr<torch::Tensor> Prefill(decoding::SequenceId id,
                                        const decoding::PrefillRequest& request) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.prefill_tokens.push_back(static_cast<int64_t>(request.prompt.size()));
    if (absl::Status s = MaybeFail("prefill", calls_.prefill_tokens.size()); !s.ok()) return s;
    last_.at(id) = request.prompt.back();
    return Row(request.prompt.back());
  }
  absl::StatusOr<torch::Tensor> Extend(decoding::SequenceId id,
                                       const std::vector<int64_t>& tokens) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.extend_tokens.push_back(static_cast<int64_t>(tokens.size()));
    if (absl::Status s = MaybeFail("extend", calls_.extend_tokens.size()); !s.ok()) return s;
    last_.at(id) = tokens.back();
    return Row(tokens.back());
  }
  absl::StatusOr<torch::Tensor> Step(const std::vector<decoding::SequenceId>& ids,
                                     const std::vector<int64_t>& tokens) override {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.step_batches.push_back(static_cast<int64_t>(ids.size()));
    if (absl::Status s = MaybeFail("step", calls_.step_batches.size()); !s.ok()) return s;
    std::vector<torch::Tensor> rows;
    for (size_t i = 0; i < ids.size(); ++i) {
      last_.at(ids[i]) = tokens[i];
      rows.push_back(Row(tokens[i]));
    }
    return torch::stack(rows);
  }
  absl::Status Release(decoding::SequenceId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_.releases;
    last_.erase(id);
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> Position(decoding::SequenceId) const override { return 0; }
  int64_t active() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(last_.size());
  }

 private:
  // Logits whose argmax is (token + 1) % vocab.
  torch::Tensor Row(int64_t token) const {
    torch::Tensor row = torch::zeros({info_.vocab_size});
    row[(token + 1) % info_.vocab_size] = 10.0f;
    return row;
  }
  absl::Status MaybeFail(const std::string& kind, size_t call) {
    auto it = failures_.find(kind);
    if (it == failures_.end() || it->second.first != static_cast<int64_t>(call)) {
      return absl::OkStatus();
    }
    switch (it->second.second) {
      case FakeFailure::kNone:
        return absl::OkStatus();
      case FakeFailure::kStatus:
        return absl::InternalError(absl::StrCat("fake ", kind, " failure"));
      case FakeFailure::kThrow:
        TORCH_CHECK(false, "fake ", kind, " threw");
      case FakeFailure::kOutOfMemory:
        TORCH_CHECK_WITH(OutOfMemoryError, false, "fake ", kind, " is out of memory");
    }
    return absl::OkStatus();
  }

  decoding::DecoderInfo info_;
  mutable std::mutex mu_;
  std::map<std::string, std::pair<int64_t, FakeFailure>> failures_;
  std::map<decoding::SequenceId, int64_t> last_;
  decoding::SequenceId next_id_ = 1;
  FakeDecoderCalls calls_;
};

}  // namespace performer::server::fake
