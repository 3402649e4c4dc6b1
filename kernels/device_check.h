// Device checks shared by the kernel entry points: every tensor of one call
// must be on one device, and that device must have an implementation. Only
// the CPU kernels exist so far; a CUDA twin is dispatched by the entry point
// once it exists, and this check then admits CUDA.
#pragma once

#include <torch/types.h>

#include <initializer_list>

namespace performer::kernels {

inline void CheckKernelDevice(const char* op, const torch::Tensor& reference,
                              std::initializer_list<const torch::Tensor*> others) {
  for (const torch::Tensor* t : others) {
    TORCH_CHECK(t->device() == reference.device(), op,
                ": all tensors must be on the same device (got ", reference.device(), " and ",
                t->device(), ")");
  }
  TORCH_CHECK(reference.device().is_cpu(), op, ": no kernel for device ", reference.device(),
              " in this build (only the CPU kernel is implemented); move the tensors to the CPU");
}

}  // namespace performer::kernels
