#include "kernels/cpu/fused_linear_cpu.h"

#include <torch/torch.h>

#include <algorithm>

#include "kernels/cpu/skinny_linear_cpu.h"
#include "kernels/cpu/weight_dtype_linear_cpu.h"
#include "kernels/cpu/weight_formats.h"

namespace performer::kernels::cpu {
namespace {

// Widened weights per sgemm call: small enough to stay in L2 between the
// widening and the multiply, large enough that sgemm's packing is amortised.
constexpr int64_t kWidenTileBytes = int64_t{512} << 10;

// torch's bfloat16 holds the upper 16 bits of a float32, the layout the bf16
// kernels read.
const uint16_t* Bf16Data(const torch::Tensor& weight) {
  return reinterpret_cast<const uint16_t*>(weight.data_ptr());
}

// y (rows, out) = h W^T + bias with W's compact rows widened to float32 a
// tile at a time: each tile of weight rows becomes a contiguous block of
// y^T's rows, so sgemm writes in place.
torch::Tensor WidenedLinear(const torch::Tensor& h, const torch::Tensor& weight,
                            const FusedLinearOptions& o) {
  const int64_t rows = h.size(0), in = h.size(1), out = weight.size(0);
  const bool int8 = weight.scalar_type() == torch::kChar;
  const int64_t blocks = Int8BlocksPerRow(in);
  const int64_t tile = std::clamp<int64_t>(kWidenTileBytes / (4 * std::max<int64_t>(in, 1)), 1, out);
  torch::Tensor yt = torch::empty({out, rows}, h.options());
  torch::Tensor widened = torch::empty({tile, in}, h.options());
  const torch::Tensor ht = h.t();
  for (int64_t begin = 0; begin < out; begin += tile) {
    const int64_t count = std::min(tile, out - begin);
    torch::Tensor w = widened.narrow(0, 0, count);
    if (int8) {
      DequantizeInt8(weight.data_ptr<int8_t>() + begin * in,
                     o.weight_scales.data_ptr<float>() + begin * blocks, count, in,
                     w.data_ptr<float>());
    } else {
      ConvertFromBf16(Bf16Data(weight) + begin * in, count * in, w.data_ptr<float>());
    }
    torch::Tensor part = yt.narrow(0, begin, count);
    at::mm_out(part, w, ht);
  }
  torch::Tensor y = yt.t().contiguous();
  return o.bias.defined() ? y.add_(o.bias) : y;
}

}  // namespace

torch::Tensor FusedLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const FusedLinearOptions& o) {
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  torch::Tensor h = x;
  if (o.norm_weight.defined()) {
    h = at::layer_norm(x, {in}, o.norm_weight, o.norm_bias, o.norm_eps).contiguous();
  }
  const float* bias = o.bias.defined() ? o.bias.data_ptr<float>() : nullptr;
  torch::Tensor y;
  if (weight.scalar_type() == torch::kFloat) {
    y = SkinnyLinearForward(h, weight, o.bias);
  } else if (rows > kMaxStreamedRows) {
    y = WidenedLinear(h, weight, o);
  } else if (weight.scalar_type() == torch::kBFloat16) {
    y = torch::empty({rows, out}, x.options());
    LinearBf16(h.data_ptr<float>(), Bf16Data(weight), bias, y.data_ptr<float>(), rows, in, out);
  } else {
    y = torch::empty({rows, out}, x.options());
    LinearInt8(h.data_ptr<float>(), weight.data_ptr<int8_t>(), o.weight_scales.data_ptr<float>(),
               bias, y.data_ptr<float>(), rows, in, out);
  }
  if (o.activation == FusedActivation::kGelu) y = at::gelu(y);
  if (o.residual.defined()) y.add_(o.residual);
  return y;
}

}  // namespace performer::kernels::cpu
