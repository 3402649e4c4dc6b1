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

// Up to this many outputs the streamed path's epilogue runs as plain loops.
constexpr int64_t kLoopEpilogueElements = 4096;

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

// LayerNorm of each row of x (rows, in) into `out`, as at::layer_norm
// computes it (biased variance, eps inside the square root), with the sums in
// double.
void NormRows(const float* x, int64_t rows, int64_t in, const FusedLinearOptions& o, float* out) {
  const float* weight = o.norm_weight.data_ptr<float>();
  const float* bias = o.norm_bias.defined() ? o.norm_bias.data_ptr<float>() : nullptr;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * in;
    double sum = 0, squares = 0;
    for (int64_t i = 0; i < in; ++i) sum += row[i];
    const double mean = in > 0 ? sum / static_cast<double>(in) : 0.0;
    for (int64_t i = 0; i < in; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const double variance = in > 0 ? squares / static_cast<double>(in) : 0.0;
    const auto scale = static_cast<float>(1.0 / std::sqrt(variance + o.norm_eps));
    const auto shift = static_cast<float>(mean);
    float* dst = out + r * in;
    for (int64_t i = 0; i < in; ++i) {
      dst[i] = (row[i] - shift) * scale * weight[i] + (bias != nullptr ? bias[i] : 0.0f);
    }
  }
}

// The compact weights' streamed path (up to kMaxStreamedRows rows): the norm
// and the epilogue in plain loops around the kernel, so that a decode step's
// projection is one call with no tensor ops beside it (at one row their
// dispatch and allocations cost as much as reading an int8 layer).
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
  float* yp = y.data_ptr<float>();
  if (weight.scalar_type() == torch::kBFloat16) {
    LinearBf16(h, Bf16Data(weight), bias, yp, rows, in, out);
  } else {
    LinearInt8(h, weight.data_ptr<int8_t>(), o.weight_scales.data_ptr<float>(), bias, yp, rows, in,
               out);
  }
  // Few outputs (a decode step of a few rows): plain loops; more: the
  // vectorized, threaded tensor ops.
  const bool gelu = o.activation == FusedActivation::kGelu;
  if (rows * out > kLoopEpilogueElements) {
    if (gelu) y = at::gelu(y);
    if (o.residual.defined()) y.add_(o.residual);
    return y;
  }
  const float* residual = o.residual.defined() ? o.residual.data_ptr<float>() : nullptr;
  if (gelu || residual != nullptr) {
    constexpr float kInvSqrt2 = 0.70710678118654752440f;
    for (int64_t i = 0; i < rows * out; ++i) {
      float v = yp[i];
      if (gelu) v = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
      if (residual != nullptr) v += residual[i];
      yp[i] = v;
    }
  }
  return y;
}

}  // namespace

torch::Tensor FusedLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                 const FusedLinearOptions& o) {
  const int64_t rows = x.size(0), in = x.size(1);
  const bool compact = weight.scalar_type() != torch::kFloat;
  if (compact && rows <= kMaxStreamedRows) return StreamedCompactLinear(x, weight, o);
  torch::Tensor h = x;
  if (o.norm_weight.defined()) {
    h = at::layer_norm(x, {in}, o.norm_weight, o.norm_bias, o.norm_eps).contiguous();
  }
  // float32: the skinny kernel with the same tensor ops as the separate step
  // around it (the same bits); compact weights past the streamed rows:
  // widened tiles for sgemm.
  torch::Tensor y = compact ? WidenedLinear(h, weight, o) : SkinnyLinearForward(h, weight, o.bias);
  if (o.activation == FusedActivation::kGelu) y = at::gelu(y);
  if (o.residual.defined()) y.add_(o.residual);
  return y;
}

}  // namespace performer::kernels::cpu
