// CPU implementation of CausalLinearPrefill (kernels/causal_linear_prefill.h):
// per chunk of `chunk` tokens, with torch matrix products over all N*H
// sequences at once,
//   out_c = tril(Qc Kc^T) Vc + Qc S;   S <- S + Kc^T Vc.
// Inputs checked by the entry point: phi_q, phi_k (N,H,L,M), v (N,H,L,E) of
// one floating dtype (float32 or float64), initial_state (N,H,M,E) of that
// dtype or undefined. Built from differentiable torch ops (no in-place update
// of anything autograd saved), so gradients flow to every input.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "kernels/causal_linear_prefill.h"

namespace performer::kernels::cpu {

CausalLinearPrefillResult CausalLinearPrefillCpu(const torch::Tensor& phi_q,
                                                 const torch::Tensor& phi_k,
                                                 const torch::Tensor& values,
                                                 const torch::Tensor& initial_state, int64_t chunk);

}  // namespace performer::kernels::cpu
