// CPU kernel of kernels/linear_state_step.h (inputs already validated and
// contiguous float32). `slots` (R,) int64, or null for the identity, maps
// state s (row s of a step) to state[slots[s]] (and to sums/key_max[slots[s]]);
// the slots of one call are distinct.
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

// A scan (kernels/linear_state_step.h): `tokens` tokens of each state, in
// order. Token t of state s is row
//   (s / heads) * tokens * heads + t * token_stride + (s % heads) * head_stride
// of the inputs and the output: token-major [C, T, H] rows with
// token_stride = heads, head_stride = 1, or state-major [S, T] rows with
// heads = 1, token_stride = 1. The default is a step: row s.
struct ScanLayout {
  int64_t tokens = 1;
  int64_t heads = 1;
  int64_t token_stride = 1;
  int64_t head_stride = 0;
};

torch::Tensor FavorStateStepForward(torch::Tensor& state, const torch::Tensor& v,
                                    const StepNormalization& norm, const FavorFeatures& favor,
                                    const int64_t* slots = nullptr,
                                    const ScanLayout& scan = {});

// Without `norm`: (R, E + 1) = q . S; with it: the normalised (R, E).
torch::Tensor LinearStateStepForward(torch::Tensor& state, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& decay,
                                     const StepNormalization* norm = nullptr,
                                     const int64_t* slots = nullptr,
                                     const ScanLayout& scan = {});

}  // namespace performer::kernels::cpu
