// The SequenceDecoder contract (sequence_decoder.h) over the library's pool
// of per-slot recurrent states (core/recurrent/state_pool.h), shared by
// every decoder: the pool, the slot bookkeeping and the argument checks
// (slot_table.h), the back-to-the-caller's-order of step logits, moving a
// slot on release, taking a sequence's state out and putting it back
// (Snapshot / Restore), and the error boundary (nothing a subclass throws
// leaves an entry point: status_from_exception.h). A subclass supplies the
// model's part of each call through the hooks below, which run with their
// arguments already checked, in InferenceMode.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "core/decoding/sequence_decoder.h"
#include "core/decoding/slot_table.h"
#include "core/recurrent/state_pool.h"

namespace performer::decoding {

class SlotPoolDecoder : public SequenceDecoder {
 public:
  const DecoderInfo& info() const final { return info_; }
  absl::StatusOr<SequenceId> Create() final;
  absl::StatusOr<torch::Tensor> Prefill(SequenceId id, const PrefillRequest& request) final;
  // Prompts of one length in consecutive slots (sequences created one after
  // another, in that order) go through PrefillSlots as one batch; any other
  // set one sequence at a time.
  std::vector<absl::StatusOr<torch::Tensor>> PrefillBatch(
      const std::vector<PrefillItem>& items) final;
  absl::StatusOr<torch::Tensor> Extend(SequenceId id, const std::vector<int64_t>& tokens) final;
  absl::StatusOr<torch::Tensor> Step(const std::vector<SequenceId>& ids,
                                     const std::vector<int64_t>& tokens) final;
  absl::Status Release(SequenceId id) final;
  absl::StatusOr<StateSnapshot> Snapshot(SequenceId id) const final;
  absl::Status Restore(SequenceId id, const StateSnapshot& snapshot) final;
  absl::Status CheckSnapshot(const StateSnapshot& snapshot) const final;
  absl::StatusOr<int64_t> Position(SequenceId id) const final { return table_.Position(id); }
  int64_t active() const final { return table_.active(); }

 protected:
  // `info` complete but for the state bytes, which the pool gives
  // (capacity, vocabulary, lengths); `device` where the pool and the
  // weights are.
  SlotPoolDecoder(const DecoderInfo& info, const torch::Device& device, StatePool pool);

  // Checks the encoder input of a Prefill; the default refuses a source.
  virtual absl::Status CheckSource(const PrefillRequest& request) const;
  // Resets row `slot` and feeds it the prompt: logits [vocab] after the
  // last prompt token (any device).
  virtual torch::Tensor PrefillSlot(int64_t slot, const PrefillRequest& request) = 0;
  // The same for rows [first, first + requests.size()), whose prompts have
  // one length: logits [requests.size(), vocab]. The default calls
  // PrefillSlot for each.
  virtual torch::Tensor PrefillSlots(int64_t first,
                                     const std::vector<const PrefillRequest*>& requests);
  // Feeds `tokens` (on the device) to row `slot`, at `position`: logits
  // [vocab] after the last.
  virtual torch::Tensor ExtendSlot(int64_t slot, int64_t position, const torch::Tensor& tokens) = 0;
  // One token per row of plan.slots (ascending): tokens [k] on the device ->
  // logits [k, vocab] in plan order.
  virtual torch::Tensor StepSlots(const SlotTable::StepPlan& plan, const torch::Tensor& tokens) = 0;

  StatePool& pool() { return pool_; }

  // Token ids (or slot indices) as an int64 tensor on the device.
  torch::Tensor OnDevice(const std::vector<int64_t>& values) const;

  const torch::Device& device() const { return device_; }
  // For facts learnt after construction (info().cuda_graphs).
  DecoderInfo& mutable_info() { return info_; }

 private:
  // Prefill's checks: the slot of a created, not yet prefilled sequence
  // whose request this model takes (nothing thrown escapes).
  absl::StatusOr<int64_t> CheckPrefill(SequenceId id, const PrefillRequest& request) const;

  DecoderInfo info_;
  torch::Device device_;
  StatePool pool_;
  SlotTable table_;
};

}  // namespace performer::decoding
