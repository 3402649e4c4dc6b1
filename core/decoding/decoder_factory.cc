#include "core/decoding/decoder_factory.h"

#include "absl/strings/str_cat.h"
#include "core/decoding/fast_transformers_decoder.h"
#include "core/decoding/performer_decoder.h"

namespace performer::decoding {
namespace {

bool DecodesWithPerformerDecoder(const models::LoadedModel& model) {
  return (model.model_class == "PerformerLM" && model.lm->config().causal) ||
         model.model_class == "PerformerEncDec";
}

}  // namespace

absl::StatusOr<int64_t> StateBytesPerSequence(const models::LoadedModel& model) {
  if (DecodesWithPerformerDecoder(model)) return PerformerDecoder::StateBytesPerSequence(model);
  if (model.model_class == "FastTransformersLM") {
    return FastTransformersDecoder::StateBytesPerSequence(model);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("model_class ", model.model_class, " does not decode"));
}

absl::StatusOr<std::unique_ptr<SequenceDecoder>> CreateDecoder(models::LoadedModel model,
                                                               int64_t capacity,
                                                               absl::Status* warnings) {
  if (model.model_class == "FastTransformersLM") {
    absl::StatusOr<std::unique_ptr<FastTransformersDecoder>> decoder =
        FastTransformersDecoder::Create(std::move(model), capacity);
    if (!decoder.ok()) return decoder.status();
    return std::unique_ptr<SequenceDecoder>(*std::move(decoder));
  }
  absl::StatusOr<std::unique_ptr<PerformerDecoder>> decoder =
      PerformerDecoder::Create(std::move(model), capacity);
  if (!decoder.ok()) return decoder.status();
  if (warnings != nullptr) *warnings = (*decoder)->cuda_graphs_status();
  return std::unique_ptr<SequenceDecoder>(*std::move(decoder));
}

}  // namespace performer::decoding
