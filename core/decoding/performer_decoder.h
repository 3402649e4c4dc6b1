// SequenceDecoder for PerformerLM (causal) and PerformerEncDec, using the
// recurrent form of linear attention (docs/reference/performer-pytorch.md
// §9.1): each sequence's state lives in one row of a preallocated pool (one
// tensor per state kind and layer, first dimension = slot). Active slots are
// kept compact (a release moves the last active row into the hole), so a step
// over the active sequences runs on views of a contiguous range of rows: a few
// large tensor operations, no gather. Any other subset is gathered and
// scattered back.
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
#include <unordered_map>
#include <vector>

#include "core/decoding/cuda_step_graphs.h"
#include "core/decoding/sequence_decoder.h"
#include "core/models/model_folder.h"

namespace performer::decoding {

struct PerformerDecoderOptions {
  // On a GPU, capture the batched step as CUDA graphs (one per batch-size
  // bucket) and replay them when every live sequence steps. If capturing
  // fails the decoder steps eagerly; info().cuda_graphs says which.
  bool cuda_graphs = true;
};

class PerformerDecoder : public SequenceDecoder {
 public:
  // FailedPrecondition for a non-causal PerformerLM or a FastAttention folder.
  static absl::StatusOr<std::unique_ptr<PerformerDecoder>> Create(
      models::LoadedModel model, int64_t capacity, const PerformerDecoderOptions& options = {});
  // info().state_bytes_per_sequence of a decoder of `model` (a causal
  // PerformerLM or a PerformerEncDec), without building one: what sizes the
  // slots for a memory budget.
  static int64_t StateBytesPerSequence(const models::LoadedModel& model);

  const DecoderInfo& info() const override { return info_; }
  absl::StatusOr<SequenceId> Create() override;
  absl::StatusOr<torch::Tensor> Prefill(SequenceId id, const PrefillRequest& request) override;
  absl::StatusOr<torch::Tensor> Extend(SequenceId id, const std::vector<int64_t>& tokens) override;
  absl::StatusOr<torch::Tensor> Step(const std::vector<SequenceId>& ids,
                                     const std::vector<int64_t>& tokens) override;
  absl::Status Release(SequenceId id) override;
  absl::StatusOr<int64_t> Position(SequenceId id) const override;
  int64_t active() const override { return static_cast<int64_t>(slot_owner_.size()); }
  // Why steps run eagerly although CUDA graphs were asked for (OK otherwise).
  const absl::Status& cuda_graphs_status() const { return step_graphs_status_; }

 private:
  PerformerDecoder(models::LoadedModel model, int64_t capacity,
                   const PerformerDecoderOptions& options);
  absl::StatusOr<int64_t> SlotOf(SequenceId id) const;
  // The entry points' bodies; the entry points turn what they throw into a
  // status (status_from_exception.h).
  absl::StatusOr<SequenceId> CreateUnguarded();
  absl::StatusOr<torch::Tensor> PrefillUnguarded(SequenceId id, const PrefillRequest& request);
  absl::StatusOr<torch::Tensor> ExtendUnguarded(SequenceId id, const std::vector<int64_t>& tokens);
  absl::StatusOr<torch::Tensor> StepUnguarded(const std::vector<SequenceId>& ids,
                                              const std::vector<int64_t>& tokens);
  absl::Status ReleaseUnguarded(SequenceId id);

  models::LoadedModel model_;
  models::PerformerLM decoder_{nullptr};  // the LM, or the enc-dec's decoder
  DecoderInfo info_;
  torch::Device device_{torch::kCPU};  // of the weights and the state pool
  models::DecodeState pool_;
  std::vector<SequenceId> slot_owner_;  // slot -> id, for slots [0, active)
  std::unordered_map<SequenceId, int64_t> slot_of_;
  std::vector<bool> prefilled_;  // by slot
  // By slot: the host's copy of pool_.positions, so that the checks of
  // Extend and Step and Position() read no device memory (on a GPU each
  // read would be a copy and a synchronisation).
  std::vector<int64_t> positions_;
  SequenceId next_id_ = 1;
  std::unique_ptr<CudaStepGraphs> step_graphs_;  // GPU with cuda_graphs only
  absl::Status step_graphs_status_;              // why there are none, if asked for
};

}  // namespace performer::decoding
