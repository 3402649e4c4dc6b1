#include "kernels/cuda/torch_cuda.h"

#include <torch/torch.h>

#if PERFORMER_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace performer::kernels::cuda {

void* CurrentStream(const torch::Tensor& on_device) {
  TORCH_CHECK(on_device.is_cuda(), "CurrentStream: tensor is on ", on_device.device(),
              ", not a CUDA device");
#if PERFORMER_TORCH_CUDA
  return c10::cuda::getCurrentCUDAStream(on_device.device().index()).stream();
#else
  TORCH_CHECK(false, "this LibTorch has no CUDA");
  return nullptr;
#endif
}

void CheckLaunch(const char* error, const char* op) {
  TORCH_CHECK(error == nullptr, op, ": CUDA kernel failed: ", error);
}

}  // namespace performer::kernels::cuda
