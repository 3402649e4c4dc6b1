// What the kernel library was built with.
#pragma once

namespace performer::kernels {

// True when kernels/cuda was compiled into this binary (nvcc was found).
bool CudaKernelsCompiled();
// True when LibTorch itself has CUDA, so the CUDA kernels can run.
bool TorchHasCuda();

}  // namespace performer::kernels
