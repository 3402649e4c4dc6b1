#include "kernels/cuda_row_invariance.h"

#include <atomic>

namespace performer::kernels {
namespace {

std::atomic<bool> cuda_row_invariance{false};

}  // namespace

void SetCudaRowInvariance(bool enabled) { cuda_row_invariance.store(enabled); }

bool CudaRowInvariance() { return cuda_row_invariance.load(); }

bool RowInvariantOn(const c10::Device& device) {
  return device.is_cpu() ||
         (PERFORMER_CUDA_KERNELS != 0 && device.is_cuda() && CudaRowInvariance());
}

}  // namespace performer::kernels
