// CPU kernel of kernels/fused_linear.h (validated: x contiguous float32
// (rows, in), weight contiguous float32, bfloat16 or int8 (out, in), int8 with
// weight_scales, the optional tensors float32 of the right sizes).
#pragma once

#include <torch/types.h>

#include "kernels/fused_linear.h"

namespace performer::kernels::cpu {

torch::Tensor FusedLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const FusedLinearOptions& options);

}  // namespace performer::kernels::cpu
