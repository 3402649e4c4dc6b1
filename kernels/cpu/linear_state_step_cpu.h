// CPU kernel of kernels/linear_state_step.h (inputs already validated and
// contiguous float32). `slots` (R,) int64, or null for the identity, maps
// row r of q, k, v, decay and the output to state[slots[r]] (and to
// sums/key_max[slots[r]]); the slots of one call are distinct.
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
// (queries then keys), the running maximum key_max (R = B*H,) in place
// (indexed by slot when slots are given).
struct FavorFeatures {
  const float* projections;
  const float* diag;
  float* key_max;
  int64_t heads;
  float kernel_eps;
};

torch::Tensor FavorStateStepForward(torch::Tensor& state, const torch::Tensor& v,
                                    const StepNormalization& norm, const FavorFeatures& favor,
                                    const int64_t* slots = nullptr);

// Without `norm`: (R, E + 1) = q . S; with it: the normalised (R, E).
torch::Tensor LinearStateStepForward(torch::Tensor& state, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& decay,
                                     const StepNormalization* norm = nullptr,
                                     const int64_t* slots = nullptr);

}  // namespace performer::kernels::cpu
