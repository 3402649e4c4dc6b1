// SequenceDecoder for FastTransformersLM (core/models/fast_transformers_lm.h):
// the recurrent twin of the model's encoder decodes in a StatePool
// (core/recurrent/state_pool.h) through the slot form of its attentions.
// Prefill and Extend run the prompt as one chunk (each layer on all its
// tokens at once); a step runs one token of every row. Attentions whose
// state grows (full attention) hold max_seq_len positions per slot, so the
// state bytes, and admission, are exact.
#pragma once

#include <memory>

#include "core/decoding/slot_pool_decoder.h"
#include "core/models/decode_step_options.h"
#include "core/models/model_folder.h"
#include "core/recurrent/state_pool.h"

namespace performer::decoding {

class FastTransformersDecoder : public SlotPoolDecoder {
 public:
  // Create() of a sequence, beside the static factory below.
  using SlotPoolDecoder::Create;
  // FailedPrecondition when the model is not a FastTransformersLM or one of
  // its attentions has no slot form. The model's linear layers are served in
  // `weight_dtype` (core/models/decode_step_options.h).
  static absl::StatusOr<std::unique_ptr<FastTransformersDecoder>> Create(
      models::LoadedModel model, int64_t capacity,
      models::WeightDtype weight_dtype = models::WeightDtype::kFloat32);
  // info().state_bytes_per_sequence of a decoder of `model`, without one.
  static absl::StatusOr<int64_t> StateBytesPerSequence(const models::LoadedModel& model);

 protected:
  torch::Tensor PrefillSlot(int64_t slot, const PrefillRequest& request) override;
  torch::Tensor ExtendSlot(int64_t slot, int64_t position, const torch::Tensor& tokens) override;
  torch::Tensor StepSlots(const SlotTable::StepPlan& plan, const torch::Tensor& tokens) override;

 private:
  FastTransformersDecoder(const DecoderInfo& info, models::LoadedModel model, StatePool pool);

  models::LoadedModel model_;
};

}  // namespace performer::decoding
