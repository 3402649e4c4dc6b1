#include "kernels/kernels_info.h"

namespace performer::kernels {

bool CudaKernelsCompiled() {
#ifdef PERFORMER_HAVE_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool TorchHasCuda() {
#ifdef PERFORMER_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace performer::kernels
