// The decoder of a loaded model folder, whatever its class: what a server
// uses so that it knows models only through SequenceDecoder.
//   PerformerLM (causal), PerformerEncDec   PerformerDecoder
//   FastTransformersLM                      FastTransformersDecoder
// Other classes (a bidirectional PerformerLM, FastAttention) do not decode:
// FailedPrecondition.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/decoding/sequence_decoder.h"
#include "core/models/decode_step_options.h"
#include "core/models/model_folder.h"

namespace performer::decoding {

// Exact state bytes of one sequence of `model`'s decoder, without building it.
absl::StatusOr<int64_t> StateBytesPerSequence(const models::LoadedModel& model);

// Converts `model`'s linear layers to step.weight_dtype in place
// (core/attention/linear_weights.h), as CreateDecoder does, for a model that
// is served without a decoder (a bidirectional PerformerLM hosted for Embed).
// FailedPrecondition for int8 weights on a GPU.
absl::Status ServeWeightsIn(const models::LoadedModel& model,
                            const models::DecodeStepOptions& step);

// A decoder of `capacity` slots whose step computes as `step` says
// (core/models/decode_step_options.h); `warnings` (may be null) receives why
// an optional speed-up is off (CUDA graphs that could not be captured).
// FailedPrecondition for int8 weights on a GPU (the int8 kernels run on the
// CPU only).
absl::StatusOr<std::unique_ptr<SequenceDecoder>> CreateDecoder(
    models::LoadedModel model, int64_t capacity, const models::DecodeStepOptions& step = {},
    absl::Status* warnings = nullptr);

}  // namespace performer::decoding
