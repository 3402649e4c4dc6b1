#include "core/decoding/slot_table.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/decoding/token_ids.h"

namespace performer::decoding {

SlotTable::SlotTable(const DecoderInfo& info)
    : capacity_(info.capacity),
      vocab_size_(info.vocab_size),
      max_seq_len_(info.max_seq_len),
      prefilled_(static_cast<size_t>(info.capacity), false),
      positions_(static_cast<size_t>(info.capacity), 0) {}

absl::StatusOr<SequenceId> SlotTable::Create() {
  if (active() >= capacity_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", capacity_, " sequence slots are in use"));
  }
  const int64_t slot = active();
  const SequenceId id = next_id_++;
  slot_owner_.push_back(id);
  slot_of_[id] = slot;
  prefilled_[static_cast<size_t>(slot)] = false;
  positions_[static_cast<size_t>(slot)] = 0;
  return id;
}

absl::StatusOr<int64_t> SlotTable::SlotOf(SequenceId id) const {
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return absl::NotFoundError(absl::StrCat("unknown sequence ", id));
  return it->second;
}

absl::StatusOr<int64_t> SlotTable::Position(SequenceId id) const {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  return positions_[static_cast<size_t>(*slot)];
}

absl::StatusOr<int64_t> SlotTable::CheckPrefill(SequenceId id,
                                                const std::vector<int64_t>& prompt) const {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  if (prefilled_[static_cast<size_t>(*slot)]) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", id, " was already prefilled"));
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt must hold at least one token");
  if (static_cast<int64_t>(prompt.size()) > max_seq_len_) {
    return absl::OutOfRangeError(absl::StrCat(
        "prompt has ", prompt.size(), " tokens; the model's max_seq_len is ", max_seq_len_));
  }
  if (absl::Status s = CheckTokenIds(prompt, vocab_size_, "prompt"); !s.ok()) return s;
  return slot;
}

void SlotTable::MarkPrefilled(int64_t slot, int64_t tokens) {
  prefilled_[static_cast<size_t>(slot)] = true;
  positions_[static_cast<size_t>(slot)] = tokens;
}

absl::StatusOr<int64_t> SlotTable::CheckSnapshot(SequenceId id) const {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  if (!prefilled_[static_cast<size_t>(*slot)]) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " has no state yet: it was not prefilled"));
  }
  return slot;
}

absl::StatusOr<int64_t> SlotTable::CheckRestore(SequenceId id, int64_t position) const {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  if (prefilled_[static_cast<size_t>(*slot)]) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " already has a state: only a new sequence is restored"));
  }
  if (position < 1 || position > max_seq_len_) {
    return absl::OutOfRangeError(absl::StrCat("the state is at position ", position,
                                              "; this model's positions are 1..", max_seq_len_));
  }
  return slot;
}

absl::StatusOr<int64_t> SlotTable::CheckExtend(SequenceId id,
                                               const std::vector<int64_t>& tokens) const {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  if (!prefilled_[static_cast<size_t>(*slot)]) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " must be prefilled before it is extended"));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("extend needs at least one token");
  if (absl::Status s = CheckTokenIds(tokens, vocab_size_, "prompt"); !s.ok()) return s;
  const int64_t position = positions_[static_cast<size_t>(*slot)];
  if (position + static_cast<int64_t>(tokens.size()) > max_seq_len_) {
    return absl::OutOfRangeError(
        absl::StrCat("sequence ", id, " is at position ", position, "; ", tokens.size(),
                     " more tokens pass the model's max_seq_len ", max_seq_len_));
  }
  return slot;
}

absl::StatusOr<SlotTable::StepPlan> SlotTable::PlanStep(const std::vector<SequenceId>& ids,
                                                        const std::vector<int64_t>& tokens) const {
  if (ids.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step got ", ids.size(), " sequences but ", tokens.size(), " tokens"));
  }
  if (ids.empty()) return absl::InvalidArgumentError("step needs at least one sequence");
  if (absl::Status s = CheckTokenIds(tokens, vocab_size_, "step"); !s.ok()) return s;
  std::vector<int64_t> slots(ids.size());
  StepPlan plan;
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StatusOr<int64_t> slot = SlotOf(ids[i]);
    if (!slot.ok()) return slot.status();
    if (!prefilled_[static_cast<size_t>(*slot)]) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", ids[i], " must be prefilled before it is stepped"));
    }
    const int64_t position = positions_[static_cast<size_t>(*slot)];
    if (position >= max_seq_len_) {
      return absl::OutOfRangeError(absl::StrCat("sequence ", ids[i], " is at position ", position,
                                                "; the model's max_seq_len is ", max_seq_len_));
    }
    plan.live_length = std::max(plan.live_length, position + 1);
    slots[i] = *slot;
  }
  std::vector<int64_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return slots[a] < slots[b]; });
  plan.slots.resize(ids.size());
  plan.tokens.resize(ids.size());
  plan.inverse.resize(ids.size());
  for (size_t i = 0; i < order.size(); ++i) {
    plan.slots[i] = slots[order[i]];
    plan.tokens[i] = tokens[order[i]];
    plan.inverse[order[i]] = static_cast<int64_t>(i);
    if (i > 0 && plan.slots[i] == plan.slots[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", ids[order[i]], " appears twice in one step"));
    }
  }
  plan.contiguous =
      plan.slots.back() - plan.slots.front() == static_cast<int64_t>(plan.slots.size()) - 1;
  return plan;
}

void SlotTable::Advance(const StepPlan& plan) {
  for (int64_t slot : plan.slots) ++positions_[static_cast<size_t>(slot)];
}

absl::StatusOr<std::optional<SlotTable::Move>> SlotTable::Release(SequenceId id) {
  absl::StatusOr<int64_t> slot = SlotOf(id);
  if (!slot.ok()) return slot.status();
  const int64_t last = active() - 1;
  std::optional<Move> move;
  if (*slot != last) {
    move = Move{last, *slot};
    const SequenceId moved = slot_owner_[static_cast<size_t>(last)];
    slot_owner_[static_cast<size_t>(*slot)] = moved;
    slot_of_[moved] = *slot;
    prefilled_[static_cast<size_t>(*slot)] = prefilled_[static_cast<size_t>(last)];
    positions_[static_cast<size_t>(*slot)] = positions_[static_cast<size_t>(last)];
  }
  slot_owner_.pop_back();
  slot_of_.erase(id);
  return move;
}

}  // namespace performer::decoding
