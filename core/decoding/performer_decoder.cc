#include "core/decoding/performer_decoder.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/decoding/status_from_exception.h"
#include "core/decoding/token_ids.h"

namespace performer::decoding {
namespace {

torch::Tensor TokenTensor(const std::vector<int64_t>& tokens) {
  return torch::tensor(tokens, torch::TensorOptions().dtype(torch::kLong));
}

// Token ids on the model's device (the pool and the weights live there).
torch::Tensor TokenTensor(const std::vector<int64_t>& tokens, const torch::Device& device) {
  torch::Tensor t = TokenTensor(tokens);
  return device.is_cpu() ? t : t.to(device);
}

}  // namespace

absl::StatusOr<std::unique_ptr<PerformerDecoder>> PerformerDecoder::Create(
    models::LoadedModel model, int64_t capacity, const PerformerDecoderOptions& options) {
  if (capacity < 1) return absl::InvalidArgumentError("decoder capacity must be at least 1");
  if (model.model_class == "PerformerLM") {
    if (!model.lm->config().causal) {
      return absl::FailedPreconditionError(
          "model is bidirectional (causal=false): incremental decoding needs a causal PerformerLM");
    }
  } else if (model.model_class != "PerformerEncDec") {
    return absl::FailedPreconditionError(
        absl::StrCat("model_class ", model.model_class, " cannot decode"));
  }
  return std::unique_ptr<PerformerDecoder>(
      new PerformerDecoder(std::move(model), capacity, options));
}

int64_t PerformerDecoder::StateBytesPerSequence(const models::LoadedModel& model) {
  models::PerformerEncDec encdec = model.encdec;
  models::PerformerLM lm = model.model_class == "PerformerEncDec" ? encdec->decoder() : model.lm;
  c10::InferenceMode guard;
  return lm->AllocateState(1).BytesPerRow();
}

PerformerDecoder::PerformerDecoder(models::LoadedModel model, int64_t capacity,
                                   const PerformerDecoderOptions& options)
    : model_(std::move(model)) {
  info_.model_class = model_.model_class;
  if (model_.model_class == "PerformerLM") {
    decoder_ = model_.lm;
  } else {
    decoder_ = model_.encdec->decoder();
    const models::PerformerLMConfig& enc = model_.encdec->config().enc;
    info_.needs_source = true;
    info_.source_vocab_size = enc.num_tokens;
    info_.max_source_len = enc.position_limit();
  }
  // Outside InferenceMode: the model's full forward (prefill, or a caller's
  // own forward with autograd) also reads the prepared rotary tables.
  decoder_->PrepareForDecoding();
  c10::InferenceMode guard;
  info_.vocab_size = decoder_->config().num_tokens;
  info_.max_seq_len = decoder_->config().position_limit();
  info_.capacity = capacity;
  device_ = decoder_->parameters().front().device();
  pool_ = decoder_->AllocateState(capacity);
  pool_.ResetRows(0, capacity);
  info_.state_bytes_per_sequence = pool_.BytesPerRow();
  prefilled_.assign(static_cast<size_t>(capacity), false);
  positions_.assign(static_cast<size_t>(capacity), 0);
  if (options.cuda_graphs && device_.is_cuda()) {
    absl::StatusOr<std::unique_ptr<CudaStepGraphs>> graphs =
        CudaStepGraphs::Capture(decoder_, pool_);
    if (graphs.ok()) {
      step_graphs_ = *std::move(graphs);
    } else {
      step_graphs_status_ = graphs.status();
    }
    info_.cuda_graphs = step_graphs_ != nullptr;
  }
}

absl::StatusOr<int64_t> PerformerDecoder::SlotOf(SequenceId id) const {
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  return it->second;
}

absl::StatusOr<SequenceId> PerformerDecoder::Create() {
  return StatusFromException("create", [&] { return CreateUnguarded(); });
}

absl::StatusOr<torch::Tensor> PerformerDecoder::Prefill(SequenceId id, const PrefillRequest& r) {
  return StatusFromException("prefill", [&] { return PrefillUnguarded(id, r); });
}

absl::StatusOr<torch::Tensor> PerformerDecoder::Extend(SequenceId id,
                                                       const std::vector<int64_t>& tokens) {
  return StatusFromException("extend", [&] { return ExtendUnguarded(id, tokens); });
}

absl::StatusOr<torch::Tensor> PerformerDecoder::Step(const std::vector<SequenceId>& ids,
                                                     const std::vector<int64_t>& tokens) {
  return StatusFromException("decode step", [&] { return StepUnguarded(ids, tokens); });
}

absl::Status PerformerDecoder::Release(SequenceId id) {
  return StatusFromException("release", [&] { return ReleaseUnguarded(id); });
}

absl::StatusOr<SequenceId> PerformerDecoder::CreateUnguarded() {
  if (active() >= info_.capacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", info_.capacity, " sequence slots are in use"));
  }
  const int64_t slot = active();
  const SequenceId id = next_id_++;
  slot_owner_.push_back(id);
  slot_of_[id] = slot;
  prefilled_[static_cast<size_t>(slot)] = false;
  positions_[static_cast<size_t>(slot)] = 0;
  return id;
}

absl::StatusOr<torch::Tensor> PerformerDecoder::PrefillUnguarded(SequenceId id,
                                                                 const PrefillRequest& r) {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  if (prefilled_[static_cast<size_t>(*slot)]) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " was already prefilled"));
  }
  if (r.prompt.empty())
    return absl::InvalidArgumentError("the prompt must hold at least one token");
  if (static_cast<int64_t>(r.prompt.size()) > info_.max_seq_len) {
    return absl::OutOfRangeError(absl::StrCat(
        "prompt has ", r.prompt.size(), " tokens; the model's max_seq_len is ", info_.max_seq_len));
  }
  if (absl::Status s = CheckTokenIds(r.prompt, info_.vocab_size, "prompt"); !s.ok()) return s;
  if (info_.needs_source) {
    if (r.source.empty()) {
      return absl::InvalidArgumentError("an encoder-decoder model needs a non-empty source");
    }
    if (static_cast<int64_t>(r.source.size()) > info_.max_source_len) {
      return absl::OutOfRangeError(absl::StrCat("source has ", r.source.size(),
                                                " tokens; the encoder's max_seq_len is ",
                                                info_.max_source_len));
    }
    if (!r.source_mask.empty() && r.source_mask.size() != r.source.size()) {
      return absl::InvalidArgumentError(absl::StrCat("source_mask has ", r.source_mask.size(),
                                                     " entries for ", r.source.size(),
                                                     " source tokens"));
    }
    if (absl::Status s = CheckTokenIds(r.source, info_.source_vocab_size, "source"); !s.ok()) {
      return s;
    }
  } else if (!r.source.empty()) {
    return absl::InvalidArgumentError("a decoder-only model takes no source");
  }

  c10::InferenceMode guard;
  models::DecodeState rows = pool_.Rows(*slot, 1);
  rows.ResetRows(0, 1);
  models::LMForwardOptions options;
  options.capture = &rows;
  if (info_.needs_source) {
    torch::Tensor source = TokenTensor(r.source, device_).unsqueeze(0);
    torch::Tensor mask;
    if (!r.source_mask.empty()) {
      std::vector<int64_t> m(r.source_mask.begin(), r.source_mask.end());
      mask = TokenTensor(m, device_).to(torch::kBool).unsqueeze(0);
    }
    torch::Tensor encodings = model_.encdec->Encode(source, mask);
    decoder_->InitCross(encodings, mask, rows);
    options.context = encodings;
    options.context_mask = mask;
  }
  torch::Tensor logits = decoder_->forward(TokenTensor(r.prompt, device_).unsqueeze(0), options);
  prefilled_[static_cast<size_t>(*slot)] = true;
  positions_[static_cast<size_t>(*slot)] = static_cast<int64_t>(r.prompt.size());
  return logits[0][logits.size(1) - 1].to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
}

absl::StatusOr<torch::Tensor> PerformerDecoder::ExtendUnguarded(
    SequenceId id, const std::vector<int64_t>& tokens) {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  if (!prefilled_[static_cast<size_t>(*slot)]) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " must be prefilled before it is extended"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("extend needs at least one token");
  if (absl::Status s = CheckTokenIds(tokens, info_.vocab_size, "prompt"); !s.ok()) return s;
  const int64_t position = positions_[static_cast<size_t>(*slot)];
  if (position + static_cast<int64_t>(tokens.size()) > info_.max_seq_len) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence ", id, " is at position ", position, "; ", tokens.size(),
                     " more tokens pass the model's max_seq_len ", info_.max_seq_len));
  }
  c10::InferenceMode guard;
  models::DecodeState rows = pool_.Rows(*slot, 1);
  torch::Tensor logits = decoder_->Extend(TokenTensor(tokens, device_), rows, position)
                             .to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  positions_[static_cast<size_t>(*slot)] += static_cast<int64_t>(tokens.size());
  return logits;
}

absl::StatusOr<torch::Tensor> PerformerDecoder::StepUnguarded(const std::vector<SequenceId>& ids,
                                                              const std::vector<int64_t>& tokens) {
  if (ids.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step got ", ids.size(), " sequences but ", tokens.size(), " tokens"));
  }
  if (ids.empty()) return absl::InvalidArgumentError("step needs at least one sequence");
  if (absl::Status s = CheckTokenIds(tokens, info_.vocab_size, "step"); !s.ok()) return s;
  const int64_t count = static_cast<int64_t>(ids.size());
  std::vector<int64_t> slots(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StatusOr<int64_t> slot = SlotOf(ids[i]);
    if (!slot.ok()) return slot.status();
    if (!prefilled_[static_cast<size_t>(*slot)]) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", ids[i], " must be prefilled before it is stepped"));
    }
    const int64_t position = positions_[static_cast<size_t>(*slot)];
    if (position >= info_.max_seq_len) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", ids[i], " is at position ", position,
                                                "; the model's max_seq_len is ",
                                                info_.max_seq_len));
    }
    slots[i] = *slot;
  }
  // Slot order: a contiguous ascending range runs on views.
  std::vector<int64_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return slots[a] < slots[b]; });
  std::vector<int64_t> sorted_slots(ids.size()), sorted_tokens(ids.size());
  for (size_t i = 0; i < order.size(); ++i) {
    sorted_slots[i] = slots[order[i]];
    sorted_tokens[i] = tokens[order[i]];
    if (i > 0 && sorted_slots[i] == sorted_slots[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", ids[order[i]], " appears twice in one step"));
    }
  }
  const bool contiguous = sorted_slots.back() - sorted_slots.front() == count - 1;

  c10::InferenceMode guard;
  torch::Tensor token_tensor = TokenTensor(sorted_tokens, device_);
  torch::Tensor logits;
  if (step_graphs_ != nullptr && contiguous && sorted_slots.front() == 0 && count == active() &&
      count <= step_graphs_->max_rows()) {
    // Every live sequence steps: rows [0, count), the rest of the bucket free.
    logits = step_graphs_->Replay(token_tensor, count);
  } else if (contiguous) {
    models::DecodeState rows = pool_.Rows(sorted_slots.front(), count);
    logits = decoder_->Step(token_tensor, rows);
  } else {
    torch::Tensor index = TokenTensor(sorted_slots, device_);
    models::DecodeState rows = pool_.Gather(index);
    logits = decoder_->Step(token_tensor, rows);
    pool_.Scatter(index, rows);
  }
  for (int64_t slot : sorted_slots) ++positions_[static_cast<size_t>(slot)];
  // Back to the caller's order.
  std::vector<int64_t> inverse(ids.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return logits.index_select(0, TokenTensor(inverse, device_)).to(torch::kCPU);
}

absl::Status PerformerDecoder::ReleaseUnguarded(SequenceId id) {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  const int64_t last = active() - 1;
  if (*slot != last) {
    c10::InferenceMode guard;
    pool_.CopyRow(last, *slot);
    const SequenceId moved = slot_owner_[static_cast<size_t>(last)];
    slot_owner_[static_cast<size_t>(*slot)] = moved;
    slot_of_[moved] = *slot;
    prefilled_[static_cast<size_t>(*slot)] = prefilled_[static_cast<size_t>(last)];
    positions_[static_cast<size_t>(*slot)] = positions_[static_cast<size_t>(last)];
  }
  slot_owner_.pop_back();
  slot_of_.erase(id);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PerformerDecoder::Position(SequenceId id) const {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  return positions_[static_cast<size_t>(*slot)];
}

}  // namespace performer::decoding
