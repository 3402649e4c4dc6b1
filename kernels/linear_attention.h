// Non-causal linear attention over given feature maps (fast-transformers'
// LinearAttention after its feature map; performer-pytorch's
// linear_attention with eps = 0):
//
//   KV = phi_k^T v                       (N, H, M, E)
//   z  = 1 / (phi_q . sum_s phi_k[s] + eps)          (N, H, L)
//   out = (phi_q KV) * z                 (N, H, L, E)
//
// i.e. out_l = (phi_q_l . sum_s phi_k_s v_s^T) / (phi_q_l . sum_s phi_k_s +
// eps), with the reciprocal taken first as both references do. Masked keys
// are the caller's business (zero their features, as fast-transformers
// does). phi_q (N, H, L, M), phi_k (N, H, S, M), v (N, H, S, E), one floating
// dtype. CPU: tensor ops (BLAS), any strides, differentiable. CUDA: float32
// compute (other dtypes converted, result in v's dtype), forward only: with
// autograd recording on CUDA it fails, as CausalDotProduct does. Single
// entry point; CPU in kernels/cpu/linear_attention_cpu.cc, CUDA in
// kernels/cuda/linear_attention_cuda.cu.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor LinearAttentionForward(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                     const torch::Tensor& v, double eps = 1e-6);

}  // namespace performer::kernels
