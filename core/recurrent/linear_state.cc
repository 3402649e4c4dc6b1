#include "core/recurrent/linear_state.h"

#include <torch/torch.h>

#include <utility>

#include "kernels/causal_linear_prefill.h"
#include "kernels/linear_state_step.h"
#include "kernels/state_read_out.h"

namespace performer {

torch::Tensor AppendOne(const torch::Tensor& values) {
  return torch::cat({values, torch::ones_like(values.narrow(-1, 0, 1))}, -1);
}

LinearStateAdvance AdvanceLinearState(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                      const torch::Tensor& values, const torch::Tensor& from) {
  kernels::CausalLinearPrefillResult result =
      kernels::CausalLinearPrefill(phi_q, phi_k, AppendOne(values), from);
  return {result.out, result.final_state};
}

bool FusedLinearStateStep(const torch::Tensor& state_rows) {
  return kernels::LinearStateStepSupported(state_rows);
}

torch::Tensor StepLinearState(torch::Tensor& state_rows, const torch::Tensor& q,
                              const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& decay, torch::Tensor sums, double scale,
                              double offset, double eps) {
  const int64_t d = v.size(-1);
  if (FusedLinearStateStep(state_rows) && (!sums.defined() || sums.is_contiguous())) {
    return kernels::LinearStateStepNormalized(state_rows, q, k, v, decay, sums, scale, offset, eps);
  }
  // Tensor-op form of the same step (devices or layouts without the kernel).
  if (decay.defined()) state_rows.mul_(decay.view({-1, 1, 1}));
  torch::Tensor v1 = AppendOne(v);
  state_rows.baddbmm_(k.unsqueeze(-1), v1.unsqueeze(1));
  torch::Tensor out = torch::bmm(q.unsqueeze(1), state_rows).squeeze(1) * scale;
  torch::Tensor q_sum = q.sum(-1, /*keepdim=*/true);
  if (sums.defined()) {
    sums.add_(v1);
    out = out + offset * q_sum * sums;
  }
  return out.narrow(-1, 0, d) / (out.narrow(-1, d, 1) + eps * q_sum);
}

torch::Tensor StepSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                     torch::Tensor& sums, const torch::Tensor& projections,
                                     const torch::Tensor& diag, const torch::Tensor& v,
                                     double kernel_eps, double denominator_eps) {
  return kernels::FavorStateStep(state_rows, key_max, sums, projections, diag, v, kernel_eps,
                                 denominator_eps);
}

torch::Tensor StepProjectedSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                              torch::Tensor& sums, const torch::Tensor& head_inputs,
                                              const torch::Tensor& projection_t,
                                              const torch::Tensor& v, double kernel_eps,
                                              double denominator_eps) {
  return kernels::FavorProjectedStateStep(state_rows, key_max, sums, head_inputs, projection_t, v,
                                          kernel_eps, denominator_eps);
}

bool ScanLinearStateSupported(const torch::Tensor& state) {
  return kernels::LinearStateScanSupported(state);
}

torch::Tensor ScanLinearState(torch::Tensor& state_rows, const torch::Tensor& q,
                              const torch::Tensor& k, const torch::Tensor& v, torch::Tensor sums,
                              double scale, double offset, double eps) {
  return kernels::LinearStateScanNormalized(state_rows, q, k, v, std::move(sums), scale, offset,
                                            eps);
}

torch::Tensor ScanSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                     torch::Tensor& sums, const torch::Tensor& projections,
                                     const torch::Tensor& diag, const torch::Tensor& v,
                                     double kernel_eps, double denominator_eps) {
  return kernels::FavorStateScan(state_rows, key_max, sums, projections, diag, v, kernel_eps,
                                 denominator_eps);
}

torch::Tensor ScanProjectedSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                              torch::Tensor& sums, const torch::Tensor& head_inputs,
                                              const torch::Tensor& projection_t,
                                              const torch::Tensor& v, double kernel_eps,
                                              double denominator_eps) {
  return kernels::FavorProjectedStateScan(state_rows, key_max, sums, head_inputs, projection_t, v,
                                          kernel_eps, denominator_eps);
}

bool ReadOutStateSupported(const torch::Tensor& state) {
  return kernels::StateReadOutSupported(state);
}

torch::Tensor ReadOutLinearState(const torch::Tensor& state, const torch::Tensor& query_features) {
  return kernels::StateReadOut(state, query_features);
}

torch::Tensor ReadOutProjectedSoftmaxKernelState(const torch::Tensor& state,
                                                 const torch::Tensor& head_inputs,
                                                 const torch::Tensor& projection_t,
                                                 double kernel_eps) {
  return kernels::FavorProjectedReadOut(state, head_inputs, projection_t, kernel_eps);
}

}  // namespace performer
