// Checks shared by the kernel entry points: every tensor of one call must be
// on one device, and that device must have an implementation; optional
// operands hold the elements the call needs. Ops
// with a CUDA kernel pass cuda_kernel = true; they are refused on CUDA
// tensors only when this build did not compile kernels/cuda.
#pragma once

#include <ATen/core/grad_mode.h>
#include <torch/types.h>

#include <initializer_list>

namespace performer::kernels {

inline void CheckKernelDevice(const char* op, const torch::Tensor& reference,
                              std::initializer_list<const torch::Tensor*> others,
                              bool cuda_kernel = false) {
  for (const torch::Tensor* t : others) {
    if (!t->defined()) continue;
    TORCH_CHECK(t->device() == reference.device(), op,
                ": all tensors must be on the same device (got ", reference.device(), " and ",
                t->device(), ")");
  }
  if (reference.is_cuda() && cuda_kernel) {
    TORCH_CHECK(PERFORMER_CUDA_KERNELS != 0, op,
                ": this build has no CUDA kernels (nvcc was not found when it was configured); "
                "rebuild with the CUDA toolkit or move the tensors to the CPU");
    return;
  }
  TORCH_CHECK(reference.device().is_cpu(), op, ": no kernel for device ", reference.device(),
              cuda_kernel ? "" : " (this op has only a CPU kernel)",
              "; move the tensors to the CPU");
}

// The CUDA kernels are forward-only: under grad mode an input that requires
// a gradient is refused (the CPU kernels keep their backward passes).
// Undefined (optional) inputs are skipped.
inline void CheckNoCudaGradients(const char* op,
                                 std::initializer_list<const torch::Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return;
  for (const torch::Tensor* t : inputs) {
    TORCH_CHECK(!t->defined() || !t->requires_grad(), op,
                ": no CUDA backward kernel; run under torch::NoGradGuard on CUDA, or "
                "differentiate on the CPU");
  }
}

// A float32 contiguous copy of an optional operand (undefined stays
// undefined), checked to hold `numel` elements: "<op>: <name> must have N
// elements, got <sizes>".
inline torch::Tensor FloatOperand(const char* op, const torch::Tensor& t, int64_t numel,
                                  const char* name) {
  if (!t.defined()) return t;
  TORCH_CHECK(t.numel() == numel, op, ": ", name, " must have ", numel, " elements, got ",
              t.sizes());
  return t.to(torch::kFloat).contiguous();
}

}  // namespace performer::kernels
