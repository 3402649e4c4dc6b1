#include "kernels/cpu/linear_attention_cpu.h"

#include <torch/torch.h>

namespace performer::kernels::cpu {

torch::Tensor LinearAttentionForward(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                     const torch::Tensor& v, double eps) {
  const torch::Tensor kv = torch::matmul(phi_k.transpose(-1, -2), v);            // (N, H, M, E)
  const torch::Tensor k_sum = phi_k.sum(-2).unsqueeze(-1);                       // (N, H, M, 1)
  const torch::Tensor z = torch::reciprocal(torch::matmul(phi_q, k_sum) + eps);  // (N, H, L, 1)
  return torch::matmul(phi_q, kv) * z;
}

}  // namespace performer::kernels::cpu
