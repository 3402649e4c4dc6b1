#include "kernels/kernels_info.h"

namespace performer::kernels {

// PERFORMER_CUDA_KERNELS and PERFORMER_TORCH_CUDA come from the top-level
// CMakeLists.txt (0 or 1).
bool CudaKernelsCompiled() { return PERFORMER_CUDA_KERNELS != 0; }

bool TorchHasCuda() { return PERFORMER_TORCH_CUDA != 0; }

}  // namespace performer::kernels
