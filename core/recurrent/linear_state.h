// The recurrent state of causal linear attention, the one every linear
// attention decodes with (fast-transformers' RecurrentLinearAttention in its
// slot form, performer-pytorch's FAVOR+ heads): per sequence and head one
// tensor [F, D + 1], S = sum_j phi(k_j) v_j^T with Z = sum_j phi(k_j) as its
// last column, so that one product q . [S | Z] gives a token's numerator
// and normaliser together. The operations dispatch to the fused kernels
// (kernels/causal_linear_prefill.h, kernels/linear_state_step.h) and fall
// back to tensor ops where those do not run.
#pragma once

#include <torch/types.h>

namespace performer {

// [.., D] -> [.., D + 1] with a trailing 1 (v with the ones column that
// makes the state's last column the key sum).
torch::Tensor AppendOne(const torch::Tensor& values);

struct LinearStateAdvance {
  torch::Tensor out;          // [.., n, D + 1]: numerator | normaliser of each token
  torch::Tensor final_state;  // [.., F, D + 1]
};
// n tokens from the state `from` ([.., F, D + 1]; undefined = empty):
// phi_q, phi_k [.., n, F], values [.., n, D]. Token i sees the state and
// tokens 0..i. One chunkwise pass (constant memory in n).
LinearStateAdvance AdvanceLinearState(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                      const torch::Tensor& values, const torch::Tensor& from = {});

// Whether the steps below run fused for these state rows [R, F, D + 1].
bool FusedLinearStateStep(const torch::Tensor& state_rows);

// One token for each of R state rows [R, F, D + 1], in place: q, k [R, F],
// v [R, D], decay [R] or undefined (S and Z scaled first), sums [R, D + 1]
// or undefined (sum of [v, 1], added to; its offset term below). Returns
//   n = scale * q . [S | Z] + offset * (sum_f q) * sums,
//   y = n[:D] / (n[D] + eps * sum_f q)                      [R, D]
torch::Tensor StepLinearState(torch::Tensor& state_rows, const torch::Tensor& q,
                              const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& decay, torch::Tensor sums, double scale,
                              double offset, double eps);

// The FAVOR+ (softmax-kernel) step with its feature map fused in
// (kernels::FavorStateStep): projections [B, 2, H, M] of the new query and
// key, diag [B, 2, H], v [B*H, D]; the state rows, key maxima [B*H] and sums
// [B*H, D + 1] are updated in place. Only where FusedLinearStateStep holds.
torch::Tensor StepSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                     torch::Tensor& sums, const torch::Tensor& projections,
                                     const torch::Tensor& diag, const torch::Tensor& v,
                                     double kernel_eps, double denominator_eps);

// StepSoftmaxKernelState with the FAVOR+ projection done in the step
// (kernels::FavorProjectedStateStep): head_inputs [B, 2, H, D] are the new
// query and key of each head, projection_t [D, M] is (d^-1/4 P)^T.
torch::Tensor StepProjectedSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                              torch::Tensor& sums, const torch::Tensor& head_inputs,
                                              const torch::Tensor& projection_t,
                                              const torch::Tensor& v, double kernel_eps,
                                              double denominator_eps);

// The scans (kernels/linear_state_step.h): T tokens of each state in order,
// each with the operations of one step above, so that a prompt gets the
// bits the steps would give it. Only where ScanLinearStateSupported.
bool ScanLinearStateSupported(const torch::Tensor& state);
// C sequences of H heads: state_rows [C*H, F, D + 1], q, k [C, T, H, F],
// v [C, T, H, D] -> [C, T, H, D], normalised as StepLinearState (no decay).
torch::Tensor ScanLinearState(torch::Tensor& state_rows, const torch::Tensor& q,
                              const torch::Tensor& k, const torch::Tensor& v, torch::Tensor sums,
                              double scale, double offset, double eps);
// StepSoftmaxKernelState over T tokens: projections [C, T, 2, H, M], diag
// [C, T, 2, H], v [C, T, H, D] -> [C, T, H, D].
torch::Tensor ScanSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                     torch::Tensor& sums, const torch::Tensor& projections,
                                     const torch::Tensor& diag, const torch::Tensor& v,
                                     double kernel_eps, double denominator_eps);
// StepProjectedSoftmaxKernelState over T tokens: head_inputs [C, T, 2, H,
// Dh], projection_t [Dh, M], v [C, T, H, D] -> [C, T, H, D].
torch::Tensor ScanProjectedSoftmaxKernelState(torch::Tensor& state_rows, torch::Tensor& key_max,
                                              torch::Tensor& sums, const torch::Tensor& head_inputs,
                                              const torch::Tensor& projection_t,
                                              const torch::Tensor& v, double kernel_eps,
                                              double denominator_eps);

// Cross attention's read-out of fixed states [R, H, M, D + 1] (R may be an
// expanded dimension): [R, H, D] (kernels/state_read_out.h). By given query
// features [R, H, M] (ReadOutLinearState), or by FAVOR+ queries head_inputs
// [R, H, Dh] whose features it forms, projection_t [Dh, M] = (Dh^-1/4 P)^T
// (ReadOutProjectedSoftmaxKernelState). Only where ReadOutStateSupported: on
// CUDA whose kernels are row-invariant.
bool ReadOutStateSupported(const torch::Tensor& state);
torch::Tensor ReadOutLinearState(const torch::Tensor& state, const torch::Tensor& query_features);
torch::Tensor ReadOutProjectedSoftmaxKernelState(const torch::Tensor& state,
                                                 const torch::Tensor& head_inputs,
                                                 const torch::Tensor& projection_t,
                                                 double kernel_eps);

}  // namespace performer
