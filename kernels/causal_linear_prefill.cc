#include "kernels/causal_linear_prefill.h"

#include <torch/torch.h>

#include "kernels/cpu/causal_linear_prefill_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/causal_linear_prefill_launch.h"
#endif

namespace performer::kernels {
namespace {

void CheckShapes(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                 const torch::Tensor& values, const torch::Tensor& initial_state, int64_t chunk) {
  TORCH_CHECK(phi_q.dim() == 4 && phi_k.sizes() == phi_q.sizes(),
              "CausalLinearPrefill: expected phi_q and phi_k (N, H, L, M) of one shape, got ",
              phi_q.sizes(), " and ", phi_k.sizes());
  TORCH_CHECK(values.dim() == 4 && values.size(0) == phi_q.size(0) &&
                  values.size(1) == phi_q.size(1) && values.size(2) == phi_q.size(2),
              "CausalLinearPrefill: expected values (N, H, L, E) with the N, H, L of phi_q ",
              phi_q.sizes(), ", got ", values.sizes());
  if (initial_state.defined()) {
    TORCH_CHECK(
        initial_state.sizes() ==
            torch::IntArrayRef({phi_q.size(0), phi_q.size(1), phi_q.size(3), values.size(3)}),
        "CausalLinearPrefill: initial_state must be (N, H, M, E) = (", phi_q.size(0), ", ",
        phi_q.size(1), ", ", phi_q.size(3), ", ", values.size(3), "), got ", initial_state.sizes());
  }
  TORCH_CHECK(chunk >= 1, "CausalLinearPrefill: chunk must be positive, got ", chunk);
  for (const torch::Tensor* t : {&phi_q, &phi_k, &values, &initial_state}) {
    TORCH_CHECK(!t->defined() || t->is_floating_point(),
                "CausalLinearPrefill: expected floating-point inputs, got ", t->scalar_type());
  }
}

}  // namespace

CausalLinearPrefillResult CausalLinearPrefill(const torch::Tensor& phi_q,
                                              const torch::Tensor& phi_k,
                                              const torch::Tensor& values,
                                              const torch::Tensor& initial_state, int64_t chunk) {
  CheckShapes(phi_q, phi_k, values, initial_state, chunk);
  if (phi_q.is_cuda()) {
    CheckKernelDevice("CausalLinearPrefill", phi_q, {&phi_k, &values, &initial_state},
                      /*cuda_kernel=*/true);
#if PERFORMER_CUDA_KERNELS
    // Inference only on CUDA: gradients need the CPU path.
    CheckNoCudaGradients("CausalLinearPrefill", {&phi_q, &phi_k, &values, &initial_state});
    cuda::CausalLinearPrefillOutputs outputs =
        cuda::CausalLinearPrefillCuda(phi_q, phi_k, values, initial_state);
    return {outputs.out, outputs.final_state};
#endif
  }
  CheckKernelDevice("CausalLinearPrefill", phi_q, {&phi_k, &values, &initial_state});
  const torch::ScalarType dtype =
      phi_q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  return cpu::CausalLinearPrefillCpu(
      phi_q.to(dtype), phi_k.to(dtype), values.to(dtype),
      initial_state.defined() ? initial_state.to(dtype) : initial_state, chunk);
}

}  // namespace performer::kernels
