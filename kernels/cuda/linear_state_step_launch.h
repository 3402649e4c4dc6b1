// Torch-facing launch of the CUDA fused decode step
// (kernels/cuda/linear_state_step_cuda.h). Called by
// kernels/linear_state_step.cc for CUDA states after it has checked shapes,
// devices and slots; q, k, v, decay, projections, diag, head_inputs and
// projection_t are made contiguous float32 here, state, sums and key_max are
// updated in place (contiguous float32 already, as the entry point requires).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor LinearStateStepCuda(torch::Tensor& state, const torch::Tensor& q,
                                  const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& decay, const torch::Tensor& slots);

torch::Tensor LinearStateStepNormalizedCuda(torch::Tensor& state, const torch::Tensor& q,
                                            const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& decay, torch::Tensor& sums,
                                            double scale, double offset, double eps,
                                            const torch::Tensor& slots);

torch::Tensor FavorStateStepCuda(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                                 const torch::Tensor& projections, const torch::Tensor& diag,
                                 const torch::Tensor& v, double kernel_eps, double denominator_eps,
                                 const torch::Tensor& slots);

torch::Tensor FavorProjectedStateStepCuda(torch::Tensor& state, torch::Tensor& key_max,
                                          torch::Tensor& sums, const torch::Tensor& head_inputs,
                                          const torch::Tensor& projection_t, const torch::Tensor& v,
                                          double kernel_eps, double denominator_eps,
                                          const torch::Tensor& slots);

// The scans of kernels/linear_state_step.h (shapes there, checked by it):
// one LinearStateScanForward launch each, every state through every token.
torch::Tensor LinearStateScanCuda(torch::Tensor& state, const torch::Tensor& q,
                                  const torch::Tensor& k, const torch::Tensor& v);

torch::Tensor LinearStateScanNormalizedCuda(torch::Tensor& state, const torch::Tensor& q,
                                            const torch::Tensor& k, const torch::Tensor& v,
                                            torch::Tensor& sums, double scale, double offset,
                                            double eps);

torch::Tensor FavorStateScanCuda(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                                 const torch::Tensor& projections, const torch::Tensor& diag,
                                 const torch::Tensor& v, double kernel_eps, double denominator_eps);

torch::Tensor FavorProjectedStateScanCuda(torch::Tensor& state, torch::Tensor& key_max,
                                          torch::Tensor& sums, const torch::Tensor& head_inputs,
                                          const torch::Tensor& projection_t, const torch::Tensor& v,
                                          double kernel_eps, double denominator_eps);

}  // namespace performer::kernels::cuda
