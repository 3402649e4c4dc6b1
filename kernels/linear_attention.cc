#include "kernels/linear_attention.h"

#include <torch/torch.h>

#include "kernels/cpu/linear_attention_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/linear_attention_launch.h"
#endif

namespace performer::kernels {

torch::Tensor LinearAttentionForward(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                     const torch::Tensor& v, double eps) {
  CheckKernelDevice("LinearAttention", phi_q, {&phi_k, &v}, /*cuda_kernel=*/true);
  TORCH_CHECK(phi_q.dim() == 4 && phi_k.dim() == 4 && v.dim() == 4 &&
                  phi_k.size(0) == phi_q.size(0) && phi_k.size(1) == phi_q.size(1) &&
                  phi_k.size(3) == phi_q.size(3) && v.size(0) == phi_q.size(0) &&
                  v.size(1) == phi_q.size(1) && v.size(2) == phi_k.size(2),
              "LinearAttention: expected phi_q (N,H,L,M), phi_k (N,H,S,M) and v (N,H,S,E), got ",
              phi_q.sizes(), ", ", phi_k.sizes(), ", ", v.sizes());
  TORCH_CHECK(phi_q.is_floating_point() && phi_q.scalar_type() == phi_k.scalar_type() &&
                  phi_q.scalar_type() == v.scalar_type(),
              "LinearAttention: phi_q, phi_k and v must share one floating dtype");
  if (phi_q.is_cuda()) {
#if PERFORMER_CUDA_KERNELS
    CheckNoCudaGradients("LinearAttention", {&phi_q, &phi_k, &v});
    return cuda::LinearAttentionCuda(phi_q, phi_k, v, eps);
#endif
  }
  return cpu::LinearAttentionForward(phi_q, phi_k, v, eps);
}

}  // namespace performer::kernels
