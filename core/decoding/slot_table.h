// The bookkeeping every slot-pool decoder shares: which sequence owns which
// slot of the state pool, whether it was prefilled, and how many tokens it
// has consumed (kept on the host so that checks read no device memory), with
// the checks of the SequenceDecoder contract (sequence_decoder.h) on the
// arguments of each call. Active slots are kept compact, [0, active()): a
// release moves the last active slot into the hole, so a step over all live
// sequences is one contiguous range of pool rows.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/decoding/sequence_decoder.h"

namespace performer::decoding {

class SlotTable {
 public:
  // Uses info.capacity, info.vocab_size and info.max_seq_len.
  explicit SlotTable(const DecoderInfo& info);

  int64_t active() const { return static_cast<int64_t>(slot_owner_.size()); }
  // A new sequence in slot active() - 1 (not prefilled, position 0);
  // ResourceExhausted when every slot is taken.
  absl::StatusOr<SequenceId> Create();
  absl::StatusOr<int64_t> SlotOf(SequenceId id) const;
  absl::StatusOr<int64_t> Position(SequenceId id) const;

  // The slot of a sequence that may be prefilled with `prompt` (not yet
  // prefilled, 1..max_seq_len tokens, ids in the vocabulary).
  absl::StatusOr<int64_t> CheckPrefill(SequenceId id, const std::vector<int64_t>& prompt) const;
  void MarkPrefilled(int64_t slot, int64_t tokens);
  // The slot of a prefilled sequence (whose state may be taken out).
  absl::StatusOr<int64_t> CheckSnapshot(SequenceId id) const;
  // The slot of a sequence that may be given a state at `position` (not
  // yet prefilled; 1 <= position <= max_seq_len).
  absl::StatusOr<int64_t> CheckRestore(SequenceId id, int64_t position) const;
  // The slot of a prefilled sequence that may take `tokens` more.
  absl::StatusOr<int64_t> CheckExtend(SequenceId id, const std::vector<int64_t>& tokens) const;
  void Advance(int64_t slot, int64_t tokens) { positions_[static_cast<size_t>(slot)] += tokens; }

  // One step, in ascending slot order (a contiguous range runs on views).
  struct StepPlan {
    std::vector<int64_t> slots;    // ascending
    std::vector<int64_t> tokens;   // tokens[i] feeds slots[i]
    std::vector<int64_t> inverse;  // caller's i -> index in slots
    bool contiguous = false;       // slots are one range
    int64_t live_length = 0;       // the largest position after the step
  };
  // Checks a Step's arguments: as many tokens as ids, ids known, prefilled,
  // distinct and below max_seq_len, tokens in the vocabulary.
  absl::StatusOr<StepPlan> PlanStep(const std::vector<SequenceId>& ids,
                                    const std::vector<int64_t>& tokens) const;
  void Advance(const StepPlan& plan);

  // Frees the sequence's slot. When it was not the last active slot, the
  // last one moved into it: the caller copies pool row `from` to row `to`.
  struct Move {
    int64_t from = 0;
    int64_t to = 0;
  };
  absl::StatusOr<std::optional<Move>> Release(SequenceId id);

 private:
  int64_t capacity_;
  int64_t vocab_size_;
  int64_t max_seq_len_;
  std::vector<SequenceId> slot_owner_;  // slot -> id, for slots [0, active)
  std::unordered_map<SequenceId, int64_t> slot_of_;
  std::vector<bool> prefilled_;     // by slot
  std::vector<int64_t> positions_;  // by slot
  SequenceId next_id_ = 1;
};

}  // namespace performer::decoding
