#include "kernels/cuda/fused_linear_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/fused_linear_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {
namespace {

const float* OptionalData(const torch::Tensor& t) {
  return t.defined() ? t.data_ptr<float>() : nullptr;
}

torch::Tensor TensorOps(const torch::Tensor& x, const torch::Tensor& weight,
                        const FusedLinearOptions& o) {
  torch::Tensor h = x;
  if (o.norm_weight.defined()) {
    h = at::layer_norm(x, {x.size(1)}, o.norm_weight, o.norm_bias, o.norm_eps);
  }
  // bf16 weights widen exactly to float32: the products stay those of the
  // own kernel (cuBLAS's bf16 GEMM would round x and the product to bf16).
  const torch::Tensor w = weight.to(torch::kFloat);
  torch::Tensor y = o.bias.defined() ? torch::addmm(o.bias, h, w.t()) : torch::mm(h, w.t());
  if (o.activation == FusedActivation::kGelu) y = at::gelu(y);
  if (o.residual.defined()) y.add_(o.residual);
  return y;
}

}  // namespace

torch::Tensor FusedLinearCuda(const torch::Tensor& x, const torch::Tensor& weight,
                              const FusedLinearOptions& o, bool own_kernel) {
  const bool bf16 = weight.scalar_type() == torch::kBFloat16;
  const bool tensor_cores = !own_kernel && bf16 && CudaFusedLinearTensorCores();
  if (!own_kernel && !tensor_cores) return TensorOps(x, weight, o);
  torch::Tensor y = torch::empty({x.size(0), weight.size(0)}, x.options());
  FusedLinearArgs a{};
  a.weight_type = bf16 ? FusedWeightType::kBFloat16 : FusedWeightType::kFloat32;
  a.x = x.data_ptr<float>();
  a.weight = weight.data_ptr();
  a.bias = OptionalData(o.bias);
  a.norm_weight = OptionalData(o.norm_weight);
  a.norm_bias = OptionalData(o.norm_bias);
  a.norm_eps = static_cast<float>(o.norm_eps);
  a.gelu = o.activation == FusedActivation::kGelu;
  a.residual = OptionalData(o.residual);
  a.y = y.data_ptr<float>();
  a.rows = x.size(0);
  a.in = x.size(1);
  a.out = weight.size(0);
  if (tensor_cores) {
    if (!FusedLinearMmaSupported(a)) return TensorOps(x, weight, o);
    CheckLaunch(FusedLinearMmaForward(a, CurrentStream(x)), "FusedLinear (tensor cores)");
    return y;
  }
  CheckLaunch(FusedLinearForward(a, CurrentStream(x)), "FusedLinear");
  return y;
}

}  // namespace performer::kernels::cuda
