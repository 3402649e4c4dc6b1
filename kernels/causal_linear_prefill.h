// Chunkwise-parallel prefill of causal linear attention: the whole prompt in
// one call, plus the recurrent state that decoding continues from.
//
//   CausalLinearPrefill(phi_q (N,H,L,M), phi_k (N,H,L,M), v (N,H,L,E),
//                       initial_state (N,H,M,E) or undefined (= 0), chunk = 64)
//     out[n,h,l,:]      = sum_{j <= l} (phi_q[l] . phi_k[j]) v[j] + phi_q[l] S0
//     final_state[n,h]  = S0 + sum_{j < L} phi_k[j] (x) v[j]        (M x E)
//
// (phi_q, phi_k are feature-mapped queries and keys; M features, E value
// columns.) Computed chunk by chunk: inside a chunk of C tokens the causal
// part is a masked C x C matrix product, (tril(Qc Kc^T)) Vc; across chunks it
// is Qc S with the running state S, then S += Kc^T Vc. Work O(L (C + E) M),
// no L x L matrix and no per-token state.
//
// The normaliser: append a ones column to v (E -> E + 1). out[..., E] is then
// phi_q[l] . (z0 + sum_{j <= l} phi_k[j]), the denominator of linear
// attention, and final_state is (N, H, M, E + 1) whose trailing column holds
// the key sums: exactly the decode state of kernels/linear_state_step.h
// (R = N*H, M, E + 1) after final_state.view({N*H, M, E + 1}), so decoding
// picks up where the prefill stopped.
//
// Devices and dtypes:
//   * CPU: float32 or float64 (other floating inputs compute in float32),
//     torch matrix products per chunk; differentiable by autograd through
//     those ops. The outputs have the compute dtype.
//   * CUDA (kernels/cuda/causal_linear_prefill_cuda.h): forward only
//     (inference; refused under grad mode when an input requires grad).
//     bfloat16 / float16 inputs (all three of the same dtype) use tensor
//     cores with float32 accumulation; anything else computes in float32.
//     The outputs are float32; initial_state is read as float32. The CUDA
//     kernel uses its own chunk size (64 tokens for tensor cores, 32 for
//     float32): `chunk` is the CPU's tuning knob and does not change the
//     result beyond rounding.
// All tensors on one device; chunk >= 1.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace performer::kernels {

struct CausalLinearPrefillResult {
  torch::Tensor out;          // (N, H, L, E)
  torch::Tensor final_state;  // (N, H, M, E)
};

CausalLinearPrefillResult CausalLinearPrefill(const torch::Tensor& phi_q,
                                              const torch::Tensor& phi_k,
                                              const torch::Tensor& values,
                                              const torch::Tensor& initial_state = {},
                                              int64_t chunk = 64);

}  // namespace performer::kernels
