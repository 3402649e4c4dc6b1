#include "kernels/hashing.h"

#include <torch/torch.h>

#include "kernels/cpu/hashing_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/hashing_launch.h"
#endif

namespace performer::kernels {

torch::Tensor ComputeHashes(const torch::Tensor& x, const torch::Tensor& planes) {
  TORCH_CHECK(x.dim() >= 1, "ComputeHashes: X must have at least one dimension (..., E)");
  TORCH_CHECK(planes.dim() == 2, "ComputeHashes: planes must be (bits, E+1), got ", planes.sizes());
  const int64_t dims = x.size(-1);
  TORCH_CHECK(planes.size(1) == dims + 1, "ComputeHashes: planes must have E+1 = ", dims + 1,
              " columns (the last one is the offset), got ", planes.size(1));
  TORCH_CHECK(planes.size(0) >= 1 && planes.size(0) <= 63,
              "ComputeHashes: the number of bits (planes rows) must be in [1, 63], got ",
              planes.size(0));
  TORCH_CHECK(x.scalar_type() == planes.scalar_type(),
              "ComputeHashes: X and planes must share a dtype");
  TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble,
              "ComputeHashes: expected float32 or float64 inputs, got ", x.scalar_type());
  std::vector<int64_t> batch_shape(x.sizes().begin(), x.sizes().end() - 1);
  torch::Tensor flat = x.detach().reshape({-1, dims}).contiguous();
  if (x.is_cuda()) {
    CheckKernelDevice("ComputeHashes", x, {&planes}, /*cuda_kernel=*/true);
#if PERFORMER_CUDA_KERNELS
    return cuda::ComputeHashesCuda(flat, planes.detach()).view(batch_shape);
#endif
  }
  CheckKernelDevice("ComputeHashes", x, {&planes});
  return cpu::ComputeHashesCpu(flat, planes.detach().contiguous()).view(batch_shape);
}

}  // namespace performer::kernels
