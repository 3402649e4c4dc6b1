// CPU kernel of kernels/linear_state_step.h (inputs already validated and
// contiguous float32).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

torch::Tensor LinearStateStepForward(torch::Tensor& state, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& decay);

}  // namespace performer::kernels::cpu
