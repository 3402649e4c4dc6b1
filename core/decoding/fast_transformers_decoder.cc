#include "core/decoding/fast_transformers_decoder.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "core/models/model_weights.h"

namespace performer::decoding {
namespace {

absl::Status CheckDecodable(const models::LoadedModel& model) {
  if (model.model_class != models::ModelClass::kFastTransformersLM || !model.ftlm) {
    return absl::FailedPreconditionError(
        absl::StrCat("model_class ", models::ModelClassName(model.model_class),
                     " cannot decode with FastTransformersDecoder"));
  }
  if (std::string missing = model.ftlm->SlotFormMissing(); !missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("attention ", missing,
                     " has no slot form (SlotStateSpec / ForwardSlots): it cannot be served"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<FastTransformersDecoder>> FastTransformersDecoder::Create(
    models::LoadedModel model, int64_t capacity, models::WeightDtype weight_dtype) {
  if (capacity < 1) return absl::InvalidArgumentError("decoder capacity must be at least 1");
  if (absl::Status s = CheckDecodable(model); !s.ok()) return s;
  model.ftlm->PrepareForDecoding(models::WeightScalarType(weight_dtype));
  const torch::Device device = model.ftlm->token_emb->weight.device();
  c10::InferenceMode guard;
  StatePool pool(model.ftlm->SlotStateSpecs(), capacity, torch::TensorOptions().device(device));
  DecoderInfo info;
  info.model_class = std::string(models::ModelClassName(model.model_class));
  info.vocab_size = model.ftlm->config().num_tokens;
  info.max_seq_len = model.ftlm->config().max_seq_len;
  info.capacity = capacity;
  info.weight_dtype = models::WeightDtypeName(weight_dtype);
  info.weight_bytes = models::DistinctStorageBytes(models::ParametersAndBuffers(*model.ftlm));
  return std::unique_ptr<FastTransformersDecoder>(
      new FastTransformersDecoder(info, std::move(model), std::move(pool)));
}

absl::StatusOr<int64_t> FastTransformersDecoder::StateBytesPerSequence(
    const models::LoadedModel& model) {
  if (absl::Status s = CheckDecodable(model); !s.ok()) return s;
  // A pool of one slot on the CPU has the same layout.
  c10::InferenceMode guard;
  return StatePool(model.ftlm->SlotStateSpecs(), 1, torch::TensorOptions()).BytesPerSequence();
}

FastTransformersDecoder::FastTransformersDecoder(const DecoderInfo& info, models::LoadedModel model,
                                                 StatePool pool)
    : SlotPoolDecoder(info, model.ftlm->token_emb->weight.device(), std::move(pool)),
      model_(std::move(model)) {}

torch::Tensor FastTransformersDecoder::PrefillSlot(int64_t slot, const PrefillRequest& request) {
  pool().ResetRows(slot, 1);
  return ExtendSlot(slot, 0, OnDevice(request.prompt));
}

torch::Tensor FastTransformersDecoder::ExtendSlot(int64_t slot, int64_t position,
                                                  const torch::Tensor& tokens) {
  std::vector<SlotRows> rows = pool().Rows(slot, 1, position + tokens.size(0));
  torch::Tensor logits = model_.ftlm->ForwardSlots(tokens.unsqueeze(0), rows);
  return logits[0][tokens.size(0) - 1];
}

torch::Tensor FastTransformersDecoder::StepSlots(const SlotTable::StepPlan& plan,
                                                 const torch::Tensor& tokens) {
  const int64_t count = static_cast<int64_t>(plan.slots.size());
  if (plan.contiguous) {
    std::vector<SlotRows> rows = pool().Rows(plan.slots.front(), count, plan.live_length);
    return model_.ftlm->ForwardSlots(tokens.unsqueeze(1), rows).squeeze(1);
  }
  torch::Tensor index = OnDevice(plan.slots);
  std::vector<SlotRows> rows = pool().Gather(index, plan.live_length);
  torch::Tensor logits = model_.ftlm->ForwardSlots(tokens.unsqueeze(1), rows).squeeze(1);
  pool().Scatter(index, rows);
  return logits;
}

}  // namespace performer::decoding
