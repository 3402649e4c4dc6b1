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

// Inputs of FavorStateStep: projections (B, 2, H, M) and diag (B, 2, H)
// (queries then keys), the running maximum key_max (R = B*H,) in place.
struct FavorFeatures {
  const float* projections;
  const float* diag;
  float* key_max;
  int64_t heads;
  float kernel_eps;
};

torch::Tensor FavorStateStepForward(torch::Tensor& state, const torch::Tensor& v,
                                    const StepNormalization& norm, const FavorFeatures& favor);

// Without `norm`: (R, E + 1) = q . S; with it: the normalised (R, E).
torch::Tensor LinearStateStepForward(torch::Tensor& state, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& decay,
                                     const StepNormalization* norm = nullptr);

}  // namespace performer::kernels::cpu
