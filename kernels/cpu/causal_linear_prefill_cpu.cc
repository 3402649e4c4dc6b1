#include "kernels/cpu/causal_linear_prefill_cpu.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

namespace performer::kernels::cpu {

CausalLinearPrefillResult CausalLinearPrefillCpu(const torch::Tensor& phi_q,
                                                 const torch::Tensor& phi_k,
                                                 const torch::Tensor& values,
                                                 const torch::Tensor& initial_state,
                                                 int64_t chunk) {
  const int64_t N = phi_q.size(0), H = phi_q.size(1), L = phi_q.size(2), M = phi_q.size(3);
  const int64_t E = values.size(3);
  const int64_t R = N * H;
  // (R, L, .) views: one batched matmul per chunk covers every sequence.
  const torch::Tensor q = phi_q.reshape({R, L, M});
  const torch::Tensor k = phi_k.reshape({R, L, M});
  const torch::Tensor v = values.reshape({R, L, E});
  torch::Tensor state = initial_state.defined() ? initial_state.reshape({R, M, E})
                                                : torch::zeros({R, M, E}, phi_q.options());
  std::vector<torch::Tensor> outs;
  outs.reserve(static_cast<size_t>((L + chunk - 1) / chunk));
  // Lower-triangular (j <= i) mask of a full chunk, sliced for the last one.
  const torch::Tensor causal =
      torch::ones({std::min(chunk, L), std::min(chunk, L)}, phi_q.options().dtype(torch::kBool))
          .tril();
  for (int64_t start = 0; start < L; start += chunk) {
    const int64_t size = std::min(chunk, L - start);
    const torch::Tensor qc = q.narrow(1, start, size);
    const torch::Tensor kc = k.narrow(1, start, size);
    const torch::Tensor vc = v.narrow(1, start, size);
    const torch::Tensor scores =
        torch::matmul(qc, kc.transpose(1, 2))
            .masked_fill(causal.narrow(0, 0, size).narrow(1, 0, size).logical_not(), 0);
    outs.push_back(torch::matmul(scores, vc) + torch::matmul(qc, state));
    state = state + torch::matmul(kc.transpose(1, 2), vc);
  }
  torch::Tensor out =
      L == 0 ? torch::zeros({R, 0, E}, phi_q.options()) : torch::cat(outs, /*dim=*/1);
  return {out.view({N, H, L, E}), state.view({N, H, M, E})};
}

}  // namespace performer::kernels::cpu
