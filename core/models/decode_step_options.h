// How a model's decode step computes (PerformerLMImpl::PrepareForDecoding).
//
// fused (unset: on CUDA, where it measured as fast or faster at every batch,
// docs/gpu.md; off on the CPU): each branch of a layer is one projection with its norm fused in
//   front, the state kernel, and one projection with the residual (and, in
//   the feed-forward, the GELU) fused behind (kernels/fused_linear.h): a
//   layer's step takes a handful of launches on a GPU instead of one per op.
//   Branches with ScaleNorm, ReZero, a token shift or cross attention, and
//   reversible stacks, keep the separate ops. On the CPU with float32 weights
//   the fused step gives the same bits as the separate ops up to 64 rows.
// weight_dtype: the dtype the model's linear layers (projections,
//   feed-forwards, output head) are served in, prefill and decode step alike
//   (core/attention/linear_weights.h: kBFloat16 rounded to nearest even, kInt8
//   symmetric with a float32 scale per block of 32 inputs, on the CPU only;
//   sums in float32); the float32 weights are not kept. The feature
//   projections, norms, embeddings (a tied output head gets a compact copy)
//   and the state stay float32. A compact dtype implies fused.
// favor_projection_in_step: on CUDA, the FAVOR+ (softmax-kernel) heads form
//   the feature projection of the new query and key inside the state
//   kernel's launch (kernels::FavorProjectedStateStep) instead of by a GEMM
//   and elementwise ops before it. Off by default, and in the server, until
//   it has been measured on a GPU (docs/gpu.md). Ignored on the CPU, whose
//   step keeps the row-invariant projection (the same bits).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace performer::models {

enum class WeightDtype { kFloat32, kBFloat16, kInt8 };

// "fp32", "bf16", "int8".
const char* WeightDtypeName(WeightDtype dtype);
// The inverse of WeightDtypeName; nullopt for any other text.
std::optional<WeightDtype> ParseWeightDtype(std::string_view text);

struct DecodeStepOptions {
  std::optional<bool> fused;
  WeightDtype weight_dtype = WeightDtype::kFloat32;
  bool favor_projection_in_step = false;

  // Whether the step fuses, for a model on a CUDA device or not.
  bool UsesFusedStep(bool on_cuda) const {
    return weight_dtype != WeightDtype::kFloat32 || fused.value_or(on_cuda);
  }
};

}  // namespace performer::models
