// CPU kernel of kernels/fused_linear.h (validated: x contiguous float32
// (rows, in), weight contiguous float32, bfloat16 or int8 (out, in), int8 with
// weight_scales, the optional tensors float32 of the right sizes).
#pragma once

#include <torch/types.h>

#include "kernels/fused_linear.h"

namespace performer::kernels::cpu {

// GELU (erf) of each row of x [..., cols] float32, a row's bits the same
// whatever the other rows (kernels::GeluRows).
torch::Tensor GeluRows(const torch::Tensor& x);

torch::Tensor FusedLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const FusedLinearOptions& options);

}  // namespace performer::kernels::cpu
