#include "kernels/skinny_linear.h"

#include <torch/torch.h>

#include "kernels/cpu/skinny_linear_cpu.h"
#include "kernels/device_check.h"

namespace performer::kernels {

bool SkinnyLinearSupported(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.device().is_cpu() && weight.device().is_cpu() && x.scalar_type() == torch::kFloat &&
         weight.scalar_type() == torch::kFloat && x.dim() == 2 && weight.dim() == 2;
}

torch::Tensor SkinnyLinear(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias) {
  CheckKernelDevice("SkinnyLinear", x, {&weight});
  TORCH_CHECK(SkinnyLinearSupported(x, weight),
              "SkinnyLinear: x and weight must be 2-D float32 CPU tensors, got ", x.sizes(), " ",
              x.scalar_type(), " and ", weight.sizes(), " ", weight.scalar_type());
  TORCH_CHECK(x.size(1) == weight.size(1), "SkinnyLinear: x has ", x.size(1),
              " features but weight expects ", weight.size(1));
  TORCH_CHECK(!bias.defined() || bias.numel() == weight.size(0), "SkinnyLinear: bias must have ",
              weight.size(0), " elements");
  return cpu::SkinnyLinearForward(x.contiguous(), weight.contiguous(),
                                  bias.defined() ? bias.to(torch::kFloat).contiguous() : bias);
}

}  // namespace performer::kernels
