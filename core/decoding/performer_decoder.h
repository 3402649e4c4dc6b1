// SequenceDecoder for PerformerLM (causal) and PerformerEncDec, using the
// recurrent form of linear attention (docs/reference/performer-pytorch.md
// §9.1): each sequence's state lives in one row of the library's state pool
// (core/recurrent/state_pool.h: the tensors each branch's
// SlotStateSpec asks for, first dimension = slot), with the slot
// bookkeeping of SlotPoolDecoder. A step over the active sequences runs on
// views of a contiguous range of rows: a few large tensor operations, no
// gather. Any other subset is gathered and scattered back.
//
// Softmax-kernel layers keep a running key maximum and rescale their sums
// exactly when it grows; the cached lower-layer outputs of earlier positions
// are not recomputed, so logits may differ from the reference's full re-forward
// by up to ~4e-4 (§9.1 of the same document).
//
// The decoder runs where the model's weights are (move the model with
// ->to(device) before Create): the pool is allocated there and logits come
// back to the CPU.
#pragma once

#include <memory>

#include "core/decoding/cuda_step_graphs.h"
#include "core/decoding/slot_pool_decoder.h"
#include "core/models/model_folder.h"
#include "core/recurrent/state_pool.h"

namespace performer::decoding {

struct PerformerDecoderOptions {
  // On a GPU, capture the batched step as CUDA graphs (one per batch-size
  // bucket) and replay them when every live sequence steps. If capturing
  // fails the decoder steps eagerly; info().cuda_graphs says which.
  bool cuda_graphs = true;
  // How the step computes: fused projections, decode weight dtype
  // (core/models/decode_step_options.h).
  models::DecodeStepOptions step;
};

class PerformerDecoder : public SlotPoolDecoder {
 public:
  // Create() of a sequence, beside the static factory below.
  using SlotPoolDecoder::Create;
  // FailedPrecondition for a non-causal PerformerLM or a model of another class.
  static absl::StatusOr<std::unique_ptr<PerformerDecoder>> Create(
      models::LoadedModel model, int64_t capacity, const PerformerDecoderOptions& options = {});
  // info().state_bytes_per_sequence of a decoder of `model` (a causal
  // PerformerLM or a PerformerEncDec), without building one: what sizes the
  // slots for a memory budget.
  static int64_t StateBytesPerSequence(const models::LoadedModel& model);

  // Why steps run eagerly although CUDA graphs were asked for (OK otherwise).
  const absl::Status& cuda_graphs_status() const { return step_graphs_status_; }

 protected:
  absl::Status CheckSource(const PrefillRequest& request) const override;
  torch::Tensor PrefillSlot(int64_t slot, const PrefillRequest& request) override;
  // A decoder-only model's prompts as one [n, length] forward on CUDA (one
  // Extend each where RowInvariantOn the device: core/attention/
  // row_invariance.h).
  torch::Tensor PrefillSlots(int64_t first,
                             const std::vector<const PrefillRequest*>& requests) override;
  torch::Tensor ExtendSlot(int64_t slot, int64_t position, const torch::Tensor& tokens) override;
  torch::Tensor StepSlots(const SlotTable::StepPlan& plan, const torch::Tensor& tokens) override;

 private:
  PerformerDecoder(const DecoderInfo& info, models::LoadedModel model, models::PerformerLM decoder,
                   StatePool pool, const PerformerDecoderOptions& options);

  models::LoadedModel model_;
  models::PerformerLM decoder_{nullptr};         // the LM, or the enc-dec's decoder
  std::unique_ptr<CudaStepGraphs> step_graphs_;  // GPU with cuda_graphs only
  absl::Status step_graphs_status_;              // why there are none, if asked for
};

}  // namespace performer::decoding
