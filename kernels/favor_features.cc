#include "kernels/favor_features.h"

#include <torch/torch.h>

#include <vector>

#include "kernels/cpu/favor_features_cpu.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/favor_features_launch.h"
#endif

namespace performer::kernels {
namespace {

#if PERFORMER_CUDA_KERNELS
cuda::FavorMapKind CudaMap(cpu::FavorMap map) {
  switch (map) {
    case cpu::FavorMap::kSoftmaxQuery:
      return cuda::FavorMapKind::kSoftmaxQuery;
    case cpu::FavorMap::kSoftmaxKey:
      return cuda::FavorMapKind::kSoftmaxKey;
    case cpu::FavorMap::kGeneralizedRelu:
      return cuda::FavorMapKind::kGeneralizedRelu;
  }
  return cuda::FavorMapKind::kGeneralizedRelu;
}
#endif

torch::Tensor Features(const char* op, const torch::Tensor& data, const torch::Tensor& projection,
                       cpu::FavorMap map, double eps) {
  CheckKernelDevice(op, data, {&projection}, /*cuda_kernel=*/true);
  TORCH_CHECK(data.dim() >= 2 && projection.dim() == 2 && projection.size(1) == data.size(-1), op,
              ": expected data (..., L, D) and projection (M, D), got ", data.sizes(), " and ",
              projection.sizes());
  TORCH_CHECK(data.is_floating_point() && projection.is_floating_point(), op,
              ": data and projection must be floating point");
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out_shape = data.sizes().vec();
  out_shape.back() = projection.size(0);
  const int64_t length = data.size(-2), dims = data.size(-1);
  const int64_t groups = length * dims == 0 ? 0 : data.numel() / (length * dims);
  if (data.numel() == 0 || projection.size(0) == 0) {
    return torch::empty(out_shape, data.options());
  }
  const torch::Tensor grouped = data.reshape({groups, length, dims});
#if PERFORMER_CUDA_KERNELS
  if (data.is_cuda()) {
    return cuda::FavorFeaturesCuda(grouped, projection, CudaMap(map), eps).view(out_shape);
  }
#endif
  // float32 / float64; the half types are computed in float32.
  const bool wide = data.scalar_type() == torch::kDouble;
  const torch::ScalarType compute = wide ? torch::kDouble : torch::kFloat;
  const torch::Tensor x = grouped.to(compute).contiguous();
  const torch::Tensor p = projection.to(compute).contiguous();
  return cpu::FavorFeaturesForward(x, p, map, eps).to(data.scalar_type()).view(out_shape);
}

}  // namespace

torch::Tensor SoftmaxKernelFeatures(const torch::Tensor& data, const torch::Tensor& projection,
                                    bool is_query, double eps) {
  return Features("SoftmaxKernelFeatures", data, projection,
                  is_query ? cpu::FavorMap::kSoftmaxQuery : cpu::FavorMap::kSoftmaxKey, eps);
}

torch::Tensor GeneralizedKernelFeatures(const torch::Tensor& data, const torch::Tensor& projection,
                                        double kernel_eps) {
  return Features("GeneralizedKernelFeatures", data, projection, cpu::FavorMap::kGeneralizedRelu,
                  kernel_eps);
}

}  // namespace performer::kernels
