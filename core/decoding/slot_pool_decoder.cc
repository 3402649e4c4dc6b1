#include "core/decoding/slot_pool_decoder.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "core/decoding/status_from_exception.h"

namespace performer::decoding {

namespace {

DecoderInfo WithStateBytes(DecoderInfo info, const StatePool& pool) {
  info.state_bytes_per_sequence = pool.BytesPerSequence();
  return info;
}

}  // namespace

SlotPoolDecoder::SlotPoolDecoder(const DecoderInfo& info, const torch::Device& device,
                                 StatePool pool)
    : info_(WithStateBytes(info, pool)), device_(device), pool_(std::move(pool)), table_(info_) {}

torch::Tensor SlotPoolDecoder::OnDevice(const std::vector<int64_t>& values) const {
  torch::Tensor t = torch::tensor(values, torch::TensorOptions().dtype(torch::kLong));
  return device_.is_cpu() ? t : t.to(device_);
}

absl::Status SlotPoolDecoder::CheckSource(const PrefillRequest& request) const {
  if (!request.source.empty()) {
    return absl::InvalidArgumentError("a decoder-only model takes no source");
  }
  return absl::OkStatus();
}

absl::StatusOr<SequenceId> SlotPoolDecoder::Create() {
  return StatusFromException("create", [&] { return table_.Create(); });
}

absl::StatusOr<int64_t> SlotPoolDecoder::CheckPrefill(SequenceId id,
                                                      const PrefillRequest& request) const {
  return StatusFromException("prefill", [&]() -> absl::StatusOr<int64_t> {
    absl::StatusOr<int64_t> slot = table_.CheckPrefill(id, request.prompt);
    if (!slot.ok()) return slot.status();
    if (absl::Status s = CheckSource(request); !s.ok()) return s;
    return slot;
  });
}

absl::StatusOr<torch::Tensor> SlotPoolDecoder::Prefill(SequenceId id,
                                                       const PrefillRequest& request) {
  return StatusFromException("prefill", [&]() -> absl::StatusOr<torch::Tensor> {
    absl::StatusOr<int64_t> slot = CheckPrefill(id, request);
    if (!slot.ok()) return slot.status();
    c10::InferenceMode guard;
    torch::Tensor logits = PrefillSlot(*slot, request);
    table_.MarkPrefilled(*slot, static_cast<int64_t>(request.prompt.size()));
    return logits.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  });
}

std::vector<absl::StatusOr<torch::Tensor>> SlotPoolDecoder::PrefillBatch(
    const std::vector<PrefillItem>& items) {
  // The slots of the items that pass Prefill's checks; one batch when they
  // are consecutive and their prompts have one length.
  std::vector<int64_t> slots;
  std::vector<const PrefillRequest*> requests;
  bool one_batch = items.size() > 1;
  for (const PrefillItem& item : items) {
    absl::StatusOr<int64_t> slot = CheckPrefill(item.id, item.request);
    if (!slot.ok() ||
        (!slots.empty() && (*slot != slots.front() + static_cast<int64_t>(slots.size()) ||
                            item.request.prompt.size() != requests.front()->prompt.size()))) {
      one_batch = false;
      break;
    }
    slots.push_back(*slot);
    requests.push_back(&item.request);
  }
  if (!one_batch) return SequenceDecoder::PrefillBatch(items);
  const absl::StatusOr<torch::Tensor> logits =
      StatusFromException("prefill", [&]() -> absl::StatusOr<torch::Tensor> {
        c10::InferenceMode guard;
        torch::Tensor out = PrefillSlots(slots.front(), requests);
        for (size_t i = 0; i < slots.size(); ++i) {
          table_.MarkPrefilled(slots[i], static_cast<int64_t>(requests[i]->prompt.size()));
        }
        return out.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
      });
  std::vector<absl::StatusOr<torch::Tensor>> results;
  results.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    results.push_back(logits.ok()
                          ? absl::StatusOr<torch::Tensor>((*logits)[static_cast<int64_t>(i)])
                          : logits.status());
  }
  return results;
}

torch::Tensor SlotPoolDecoder::PrefillSlots(int64_t first,
                                            const std::vector<const PrefillRequest*>& requests) {
  std::vector<torch::Tensor> rows;
  rows.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    rows.push_back(PrefillSlot(first + static_cast<int64_t>(i), *requests[i]));
  }
  return torch::stack(rows);
}

absl::StatusOr<torch::Tensor> SlotPoolDecoder::Extend(SequenceId id,
                                                      const std::vector<int64_t>& tokens) {
  return StatusFromException("extend", [&]() -> absl::StatusOr<torch::Tensor> {
    absl::StatusOr<int64_t> slot = table_.CheckExtend(id, tokens);
    if (!slot.ok()) return slot.status();
    absl::StatusOr<int64_t> position = table_.Position(id);
    c10::InferenceMode guard;
    torch::Tensor logits = ExtendSlot(*slot, *position, OnDevice(tokens));
    table_.Advance(*slot, static_cast<int64_t>(tokens.size()));
    return logits.to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  });
}

absl::StatusOr<torch::Tensor> SlotPoolDecoder::Step(const std::vector<SequenceId>& ids,
                                                    const std::vector<int64_t>& tokens) {
  return StatusFromException("decode step", [&]() -> absl::StatusOr<torch::Tensor> {
    absl::StatusOr<SlotTable::StepPlan> plan = table_.PlanStep(ids, tokens);
    if (!plan.ok()) return plan.status();
    c10::InferenceMode guard;
    torch::Tensor logits = StepSlots(*plan, OnDevice(plan->tokens));
    table_.Advance(*plan);
    // Back to the caller's order.
    return logits.index_select(0, OnDevice(plan->inverse)).to(torch::kCPU);
  });
}

absl::Status SlotPoolDecoder::Release(SequenceId id) {
  return StatusFromException("release", [&]() -> absl::Status {
    absl::StatusOr<std::optional<SlotTable::Move>> move = table_.Release(id);
    if (!move.ok()) return move.status();
    if (move->has_value()) {
      c10::InferenceMode guard;
      pool_.CopyRow((*move)->from, (*move)->to);
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<StateSnapshot> SlotPoolDecoder::Snapshot(SequenceId id) const {
  return StatusFromException("snapshot", [&]() -> absl::StatusOr<StateSnapshot> {
    absl::StatusOr<int64_t> slot = table_.CheckSnapshot(id);
    if (!slot.ok()) return slot.status();
    c10::InferenceMode guard;
    return pool_.Read(*slot);
  });
}

absl::Status SlotPoolDecoder::CheckSnapshot(const StateSnapshot& snapshot) const {
  if (snapshot.position < 1 || snapshot.position > info_.max_seq_len) {
    return absl::OutOfRangeError(absl::StrCat("the state is at position ", snapshot.position,
                                              "; this model's positions are 1..",
                                              info_.max_seq_len));
  }
  return pool_.CheckLayout(snapshot);
}

absl::Status SlotPoolDecoder::Restore(SequenceId id, const StateSnapshot& snapshot) {
  return StatusFromException("restore", [&]() -> absl::Status {
    absl::StatusOr<int64_t> slot = table_.CheckRestore(id, snapshot.position);
    if (!slot.ok()) return slot.status();
    c10::InferenceMode guard;
    if (absl::Status s = pool_.Write(*slot, snapshot); !s.ok()) return s;
    table_.MarkPrefilled(*slot, snapshot.position);
    return absl::OkStatus();
  });
}

}  // namespace performer::decoding
