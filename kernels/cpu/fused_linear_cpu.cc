#include "kernels/cpu/fused_linear_cpu.h"

#include <torch/torch.h>

#include "kernels/cpu/skinny_linear_cpu.h"
#include "kernels/cpu/weight_dtype_linear_cpu.h"

namespace performer::kernels::cpu {

torch::Tensor FusedLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const FusedLinearOptions& o) {
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  torch::Tensor h = x;
  if (o.norm_weight.defined()) {
    h = at::layer_norm(x, {in}, o.norm_weight, o.norm_bias, o.norm_eps).contiguous();
  }
  torch::Tensor y;
  if (weight.scalar_type() == torch::kBFloat16) {
    // torch's bfloat16 holds the upper 16 bits of a float32, the layout
    // LinearBf16 reads.
    y = torch::empty({rows, out}, x.options());
    LinearBf16(h.data_ptr<float>(), reinterpret_cast<const uint16_t*>(weight.data_ptr()),
               o.bias.defined() ? o.bias.data_ptr<float>() : nullptr, y.data_ptr<float>(), rows, in,
               out);
  } else {
    y = SkinnyLinearForward(h, weight, o.bias);
  }
  if (o.activation == FusedActivation::kGelu) y = at::gelu(y);
  if (o.residual.defined()) y.add_(o.residual);
  return y;
}

}  // namespace performer::kernels::cpu
