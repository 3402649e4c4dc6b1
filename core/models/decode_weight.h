// The decode copy of a weight matrix for DecodeStepOptions::weight_dtype
// (core/models/decode_step_options.h): the float32 weight itself (shared,
// not copied) or a bfloat16 copy rounded to nearest even. Contiguous.
#pragma once

#include <torch/types.h>

#include "core/models/decode_step_options.h"

namespace performer::models {

torch::Tensor DecodeWeight(const torch::Tensor& weight, WeightDtype dtype);

}  // namespace performer::models
