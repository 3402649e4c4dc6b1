// CPU kernel of kernels/linear_state_step.h (inputs already validated and
// contiguous float32).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

// See LinearStateStepNormalized; sums may be null.
struct StepNormalization {
  float* sums;
  float scale;
  float offset;
  float eps;
};

// Without `norm`: (R, E + 1) = q . S; with it: the normalised (R, E).
torch::Tensor LinearStateStepForward(torch::Tensor& state, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& decay,
                                     const StepNormalization* norm = nullptr);

}  // namespace performer::kernels::cpu
