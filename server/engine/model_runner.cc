#include "server/engine/model_runner.h"

#include <utility>

#include "core/decoding/status_from_exception.h"

namespace performer::server {

using decoding::StatusFromException;

ModelRunner::ModelRunner(std::unique_ptr<decoding::SequenceDecoder> decoder)
    : decoder_(std::move(decoder)) {}

namespace {

// The prompt tokens a chunk feeds.
std::vector<int64_t> ChunkTokens(const PrefillChunk& chunk) {
  const std::vector<int64_t>& prompt = chunk.sequence->request.prompt;
  return std::vector<int64_t>(prompt.begin() + static_cast<std::ptrdiff_t>(chunk.begin),
                              prompt.begin() + static_cast<std::ptrdiff_t>(chunk.end));
}

}  // namespace

absl::Status ModelRunner::TakeSlot(ScheduledSequence& s) {
  absl::StatusOr<decoding::SequenceId> id =
      StatusFromException("create", [&] { return decoder_->Create(); });
  if (!id.ok()) return id.status();
  s.decoder_id = *id;
  s.has_slot = true;
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> ModelRunner::Prefill(const PrefillChunk& chunk) {
  ScheduledSequence& s = *chunk.sequence;
  std::vector<int64_t> tokens = ChunkTokens(chunk);
  if (!chunk.first) {
    return StatusFromException("extend", [&] { return decoder_->Extend(s.decoder_id, tokens); });
  }
  if (absl::Status taken = TakeSlot(s); !taken.ok()) return taken;
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

std::vector<absl::StatusOr<torch::Tensor>> ModelRunner::PrefillFirst(
    const std::vector<const PrefillChunk*>& chunks) {
  std::vector<absl::StatusOr<torch::Tensor>> results(
      chunks.size(), absl::InternalError("the decoder gave no result for this prompt"));
  std::vector<decoding::PrefillItem> items;
  std::vector<size_t> item_chunk;  // items[k] prefills chunks[item_chunk[k]]
  items.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    ScheduledSequence& s = *chunks[i]->sequence;
    if (absl::Status taken = TakeSlot(s); !taken.ok()) {
      results[i] = taken;
      continue;
    }
    decoding::PrefillItem& item = items.emplace_back();
    item.id = s.decoder_id;
    item.request.prompt = ChunkTokens(*chunks[i]);
    item_chunk.push_back(i);
  }
  if (items.empty()) return results;
  absl::StatusOr<std::vector<absl::StatusOr<torch::Tensor>>> prefilled = StatusFromException(
      "prefill", [&]() -> absl::StatusOr<std::vector<absl::StatusOr<torch::Tensor>>> {
        return decoder_->PrefillBatch(items);
      });
  for (size_t k = 0; k < items.size(); ++k) {
    if (!prefilled.ok()) {
      results[item_chunk[k]] = prefilled.status();
    } else if (k < prefilled->size()) {
      results[item_chunk[k]] = std::move((*prefilled)[k]);
    }
  }
  return results;
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
