#include "kernels/row_norm.h"

#include <torch/torch.h>

#include <initializer_list>
#include <vector>

#include "kernels/cuda_row_invariance.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/row_norm_launch.h"
#endif

namespace performer::kernels {
namespace {

// Whether the rows of x run the CUDA kernel: float32 CUDA rows under
// CudaRowInvariance(), in a build that compiled kernels/cuda, where no
// gradient is wanted (a training forward keeps ATen's differentiable ops).
bool OwnKernel(const torch::Tensor& x, std::initializer_list<const torch::Tensor*> parameters) {
  if (!x.is_cuda() || x.scalar_type() != torch::kFloat || x.size(-1) == 0 ||
      !RowInvariantOn(x.device())) {
    return false;
  }
  if (!at::GradMode::is_enabled()) return true;
  if (x.requires_grad()) return false;
  for (const torch::Tensor* p : parameters) {
    if (p->defined() && p->requires_grad()) return false;
  }
  return true;
}

#if PERFORMER_CUDA_KERNELS
// x as a contiguous (rows, cols) matrix.
torch::Tensor Matrix(const torch::Tensor& x) { return x.reshape({-1, x.size(-1)}).contiguous(); }
#endif

}  // namespace

torch::Tensor LayerNormRows(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& bias, double eps) {
  const char* op = "LayerNormRows";
  TORCH_CHECK(x.dim() >= 1, op, ": x needs a last dimension");
  const bool own = OwnKernel(x, {&weight, &bias});
  CheckKernelDevice(op, x, {&weight, &bias}, /*cuda_kernel=*/own);
  const int64_t cols = x.size(-1);
  if (!own) {
    return at::layer_norm(x, {cols}, weight, bias, eps);
  }
#if PERFORMER_CUDA_KERNELS
  return cuda::LayerNormRowsCuda(Matrix(x), FloatOperand(op, weight, cols, "weight"),
                                 FloatOperand(op, bias, cols, "bias"), eps)
      .view(x.sizes());
#else
  TORCH_CHECK(false, op, ": this build has no CUDA kernels");
#endif
}

torch::Tensor ScaleNormRows(const torch::Tensor& x, const torch::Tensor& g, double eps) {
  const char* op = "ScaleNormRows";
  TORCH_CHECK(x.dim() >= 1, op, ": x needs a last dimension");
  TORCH_CHECK(g.numel() == 1, op, ": g must have one element, got ", g.sizes());
  const bool own = OwnKernel(x, {&g});
  CheckKernelDevice(op, x, {&g}, /*cuda_kernel=*/own);
  if (!own) {
    return x / x.norm(2, -1, /*keepdim=*/true).clamp_min(eps) * g;
  }
#if PERFORMER_CUDA_KERNELS
  return cuda::ScaleNormRowsCuda(Matrix(x), g.to(torch::kFloat).contiguous(), eps).view(x.sizes());
#else
  TORCH_CHECK(false, op, ": this build has no CUDA kernels");
#endif
}

torch::Tensor SquaredNormRows(const torch::Tensor& x) {
  const char* op = "SquaredNormRows";
  TORCH_CHECK(x.dim() >= 1, op, ": x needs a last dimension");
  const bool own = OwnKernel(x, {});
  CheckKernelDevice(op, x, {}, /*cuda_kernel=*/own);
  if (!own) return (x * x).sum(-1, /*keepdim=*/true);
#if PERFORMER_CUDA_KERNELS
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = 1;
  return cuda::SquaredNormRowsCuda(Matrix(x)).view(shape);
#else
  TORCH_CHECK(false, op, ": this build has no CUDA kernels");
#endif
}

}  // namespace performer::kernels
