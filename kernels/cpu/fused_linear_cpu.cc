#include "kernels/cpu/fused_linear_cpu.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/skinny_linear_cpu.h"
#include "kernels/cpu/weight_dtype_linear_cpu.h"
#include "kernels/cpu/weight_formats.h"

namespace performer::kernels::cpu {
namespace {

// torch's bfloat16 holds the upper 16 bits of a float32, the layout the bf16
// kernel reads.
const uint16_t* Bf16Data(const torch::Tensor& weight) {
  return reinterpret_cast<const uint16_t*>(weight.data_ptr());
}

// LayerNorm of rows [begin, end) of x (rows, in) into `out`, as
// at::layer_norm computes it (biased variance, eps inside the square root),
// with the sums in double.
void NormRowRange(const float* x, int64_t begin, int64_t end, int64_t in, double eps,
                  const float* weight, const float* bias, float* out) {
  for (int64_t r = begin; r < end; ++r) {
    const float* row = x + r * in;
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < in; ++i) sum += row[i];
    const double mean = in > 0 ? sum / static_cast<double>(in) : 0.0;
    for (int64_t i = 0; i < in; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const double variance = in > 0 ? squares / static_cast<double>(in) : 0.0;
    const auto scale = static_cast<float>(1.0 / std::sqrt(variance + eps));
    const auto shift = static_cast<float>(mean);
    float* dst = out + r * in;
    for (int64_t i = 0; i < in; ++i) {
      dst[i] = (row[i] - shift) * scale * weight[i] + (bias != nullptr ? bias[i] : 0.0f);
    }
  }
}

// Every row, each on its own (the same bits whatever the other rows).
void NormRows(const float* x, int64_t rows, int64_t in, const FusedLinearOptions& o, float* out) {
  const float* weight = o.norm_weight.data_ptr<float>();
  const float* bias = o.norm_bias.defined() ? o.norm_bias.data_ptr<float>() : nullptr;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(in, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    NormRowRange(x, begin, end, in, o.norm_eps, weight, bias, out);
  });
}

// Compact weights: the norm and the residual in plain loops around the
// streaming kernel, so that a decode step's projection has at most one tensor
// op beside it (at one row their dispatch and allocations cost as much as
// reading an int8 layer).
torch::Tensor StreamedCompactLinear(const torch::Tensor& x, const torch::Tensor& weight,
                                    const FusedLinearOptions& o) {
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  const float* h = x.data_ptr<float>();
  std::vector<float> normed;
  if (o.norm_weight.defined()) {
    normed.resize(static_cast<size_t>(rows * in));
    NormRows(h, rows, in, o, normed.data());
    h = normed.data();
  }
  const float* bias = o.bias.defined() ? o.bias.data_ptr<float>() : nullptr;
  torch::Tensor y = torch::empty({rows, out}, x.options());
  if (weight.scalar_type() == torch::kBFloat16) {
    LinearBf16(h, Bf16Data(weight), bias, y.data_ptr<float>(), rows, in, out);
  } else {
    LinearInt8(h, weight.data_ptr<int8_t>(), o.weight_scales.data_ptr<float>(), bias,
               y.data_ptr<float>(), rows, in, out);
  }
  // The GELU is ATen's, row by row; the residual add, exact whichever way,
  // a plain loop.
  if (o.activation == FusedActivation::kGelu) y = GeluRows(y);
  float* yp = y.data_ptr<float>();
  if (o.residual.defined()) {
    const float* residual = o.residual.data_ptr<float>();
    for (int64_t i = 0; i < rows * out; ++i) yp[i] += residual[i];
  }
  return y;
}

}  // namespace

torch::Tensor GeluRows(const torch::Tensor& x) {
  torch::Tensor rows = x.contiguous().view({-1, x.size(-1)});
  torch::Tensor y = torch::empty_like(rows);
  const int64_t count = rows.size(0), cols = rows.size(1);
  // One call per block of whole rows, each small enough that ATen does not
  // split it between threads, on this thread (its inference mode): ATen's
  // vectorised GELU computes a range's last cols % 32 elements with another
  // erf, so a row with such a tail gets a call of its own, and each element
  // takes one path whatever the other rows.
  const int64_t block =
      cols % 64 == 0 ? std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1)) : 1;
  for (int64_t begin = 0; begin < count; begin += block) {
    const int64_t n = std::min(block, count - begin);
    y.narrow(0, begin, n).copy_(at::gelu(rows.narrow(0, begin, n)));
  }
  return y.view(x.sizes());
}

torch::Tensor FusedLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const FusedLinearOptions& o) {
  if (weight.scalar_type() != torch::kFloat) return StreamedCompactLinear(x, weight, o);
  // float32: the skinny kernel with the same tensor ops around it as the
  // separate step (the same bits).
  const int64_t in = x.size(1);
  torch::Tensor h = x;
  if (o.norm_weight.defined()) {
    h = at::layer_norm(x, {in}, o.norm_weight, o.norm_bias, o.norm_eps).contiguous();
  }
  torch::Tensor y = SkinnyLinearForward(h, weight, o.bias);
  if (o.activation == FusedActivation::kGelu) y = GeluRows(y);
  if (o.residual.defined()) y.add_(o.residual);
  return y;
}

}  // namespace performer::kernels::cpu
