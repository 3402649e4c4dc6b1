#include "core/decoding/decoder_factory.h"

#include "absl/strings/str_cat.h"
#include "core/attention/linear_weights.h"
#include "core/decoding/fast_transformers_decoder.h"
#include "core/decoding/performer_decoder.h"
#include "core/models/model_weights.h"

namespace performer::decoding {
namespace {

absl::Status DoesNotDecode(const models::LoadedModel& model) {
  return absl::FailedPreconditionError(
      absl::StrCat("model_class ", models::ModelClassName(model.model_class), " does not decode"));
}

bool OnCuda(const models::LoadedModel& model) {
  const torch::nn::Module* held = model.module();
  if (held == nullptr) return false;
  const std::vector<torch::Tensor> params = held->parameters();
  return !params.empty() && params.front().is_cuda();
}

}  // namespace

absl::StatusOr<int64_t> StateBytesPerSequence(const models::LoadedModel& model) {
  switch (model.model_class) {
    case models::ModelClass::kPerformerLM:
      if (!model.lm->config().causal) return DoesNotDecode(model);
      return PerformerDecoder::StateBytesPerSequence(model);
    case models::ModelClass::kPerformerEncDec:
      return PerformerDecoder::StateBytesPerSequence(model);
    case models::ModelClass::kFastTransformersLM:
      return FastTransformersDecoder::StateBytesPerSequence(model);
    case models::ModelClass::kFastAttention:
      return DoesNotDecode(model);
  }
  return DoesNotDecode(model);
}

absl::Status CheckWeightDtype(const models::LoadedModel& model,
                              const models::DecodeStepOptions& step) {
  if (step.weight_dtype == models::WeightDtype::kInt8 && OnCuda(model)) {
    return absl::FailedPreconditionError(
        "weight dtype int8 runs on the CPU only (its kernels use AVX-512 VNNI / AVX2); on a GPU "
        "serve with --weight_dtype=bf16 or fp32");
  }
  return absl::OkStatus();
}

absl::Status ServeWeightsIn(const models::LoadedModel& model,
                            const models::DecodeStepOptions& step) {
  if (absl::Status s = CheckWeightDtype(model, step); !s.ok()) return s;
  if (torch::nn::Module* held = model.module(); held != nullptr) {
    ConvertLinearWeights({held}, models::WeightScalarType(step.weight_dtype));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SequenceDecoder>> CreateDecoder(
    models::LoadedModel model, int64_t capacity, const models::DecodeStepOptions& step,
    absl::Status* warnings) {
  if (absl::Status s = CheckWeightDtype(model, step); !s.ok()) return s;
  if (model.model_class == models::ModelClass::kFastTransformersLM) {
    absl::StatusOr<std::unique_ptr<FastTransformersDecoder>> decoder =
        FastTransformersDecoder::Create(std::move(model), capacity, step.weight_dtype);
    if (!decoder.ok()) return decoder.status();
    return std::unique_ptr<SequenceDecoder>(*std::move(decoder));
  }
  absl::StatusOr<std::unique_ptr<PerformerDecoder>> decoder =
      PerformerDecoder::Create(std::move(model), capacity, {true, step});
  if (!decoder.ok()) return decoder.status();
  if (warnings != nullptr) *warnings = (*decoder)->cuda_graphs_status();
  return std::unique_ptr<SequenceDecoder>(*std::move(decoder));
}

}  // namespace performer::decoding
