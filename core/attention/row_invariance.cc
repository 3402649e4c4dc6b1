#include "core/attention/row_invariance.h"

#include "kernels/cuda_row_invariance.h"

namespace performer {

bool RowInvariantOn(const torch::Device& device) {
  return device.is_cpu() || (device.is_cuda() && kernels::CudaRowInvariance());
}

}  // namespace performer
