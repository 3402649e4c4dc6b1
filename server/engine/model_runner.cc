#include "server/engine/model_runner.h"

#include <utility>

#include "core/decoding/status_from_exception.h"

namespace performer::server {

using decoding::StatusFromException;

ModelRunner::ModelRunner(std::unique_ptr<decoding::SequenceDecoder> decoder)
    : decoder_(std::move(decoder)) {}

absl::StatusOr<torch::Tensor> ModelRunner::Prefill(const PrefillChunk& chunk) {
  ScheduledSequence& s = *chunk.sequence;
  const std::vector<int64_t>& prompt = s.request.prompt;
  std::vector<int64_t> tokens(prompt.begin() + static_cast<std::ptrdiff_t>(chunk.begin),
                              prompt.begin() + static_cast<std::ptrdiff_t>(chunk.end));
  if (!chunk.first) {
    return StatusFromException("extend", [&] { return decoder_->Extend(s.decoder_id, tokens); });
  }
  absl::StatusOr<decoding::SequenceId> id =
      StatusFromException("create", [&] { return decoder_->Create(); });
  if (!id.ok()) return id.status();
  s.decoder_id = *id;
  s.has_slot = true;
  if (s.resume != nullptr) {
    if (absl::Status restored = StatusFromException(
            "restore", [&] { return decoder_->Restore(s.decoder_id, *s.resume->state); });
        !restored.ok()) {
      return restored;
    }
    if (!tokens.empty()) {
      return StatusFromException("extend", [&] { return decoder_->Extend(s.decoder_id, tokens); });
    }
    if (!s.resume->logits.defined()) {
      return absl::InternalError("a resume point without logits must leave a token to feed");
    }
    return s.resume->logits;
  }
  decoding::PrefillRequest request;
  request.prompt = std::move(tokens);
  request.source = s.request.source;
  return StatusFromException("prefill", [&] { return decoder_->Prefill(s.decoder_id, request); });
}

absl::StatusOr<torch::Tensor> ModelRunner::Step(const std::vector<ScheduledSequence*>& batch) {
  std::vector<decoding::SequenceId> ids;
  std::vector<int64_t> tokens;
  ids.reserve(batch.size());
  tokens.reserve(batch.size());
  for (const ScheduledSequence* s : batch) {
    ids.push_back(s->decoder_id);
    tokens.push_back(s->last_token);
  }
  return StatusFromException("decode step", [&] { return decoder_->Step(ids, tokens); });
}

absl::StatusOr<StateSnapshot> ModelRunner::Snapshot(const ScheduledSequence& s) const {
  if (!s.has_slot) return absl::FailedPreconditionError("the sequence holds no slot");
  return StatusFromException("snapshot", [&] { return decoder_->Snapshot(s.decoder_id); });
}

absl::Status ModelRunner::CheckSnapshot(const StateSnapshot& snapshot) const {
  return StatusFromException("check state", [&] { return decoder_->CheckSnapshot(snapshot); });
}

void ModelRunner::Release(ScheduledSequence& s) {
  if (!s.has_slot) return;
  s.has_slot = false;
  // A release that fails leaves nothing to do for this sequence: its
  // request has ended either way.
  (void)StatusFromException("release", [&] { return decoder_->Release(s.decoder_id); });
}

}  // namespace performer::server
