// The raw launchers' error convention: nullptr after a good launch, else the
// CUDA error string (which the torch-facing glue turns into a c10::Error,
// kernels/cuda/torch_cuda.h). Reads (and so clears) the last launch error.
#pragma once

#include <cuda_runtime.h>

namespace performer::kernels::cuda {

inline const char* LaunchError() {
  const cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace performer::kernels::cuda
