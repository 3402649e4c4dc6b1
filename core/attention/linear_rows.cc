#include "core/attention/linear_rows.h"

#include <vector>

#include "core/attention/linear_weights.h"
#include "core/attention/row_invariance.h"
#include "kernels/skinny_linear.h"

namespace performer {
namespace {

// Without the skinny kernel (another device), one gemv per row does up to
// this many rows.
constexpr int64_t kMaxGemvRows = 4;

// bfloat16 or int8 (core/attention/linear_weights.h): kernels::FusedLinear's.
bool IsCompact(const torch::Tensor& weight) {
  return weight.scalar_type() == torch::kBFloat16 || weight.scalar_type() == torch::kChar;
}

// Whether kernels::FusedLinear computes the rows: compact weights, and any
// CUDA weight it takes where RowInvariantOn the device (its own kernel, one
// chain of operations per row at any number of rows).
bool FusedLinearRuns(const torch::Tensor& weight) {
  return IsCompact(weight) || (weight.is_cuda() && RowInvariantOn(weight.device()) &&
                               kernels::FusedLinearSupported(weight));
}

}  // namespace

torch::Tensor LinearRows(const torch::Tensor& weight, const torch::Tensor& bias,
                         const torch::Tensor& x, const torch::Tensor& scales) {
  if (FusedLinearRuns(weight)) {
    kernels::FusedLinearOptions options;
    options.bias = bias;
    options.weight_scales = scales;
    return kernels::FusedLinear(x.contiguous(), weight, options);
  }
  const int64_t rows = x.size(0);
  if (kernels::SkinnyLinearSupported(x, weight)) {
    return kernels::SkinnyLinear(x, weight, bias);
  }
  if (rows <= kMaxGemvRows) {
    std::vector<torch::Tensor> out;
    out.reserve(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      out.push_back(bias.defined() ? torch::addmv(bias, weight, x[r]) : torch::mv(weight, x[r]));
    }
    return torch::stack(out);
  }
  torch::Tensor y = torch::mm(weight, x.t()).t().contiguous();
  return bias.defined() ? y.add_(bias) : y;
}

torch::Tensor LinearRows(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return LinearRows(layer->weight, layer->bias, x, LinearWeightScales(*layer));
}

torch::Tensor ApplyLinear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  const int64_t in = x.size(-1);
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  const bool row_kernel = !torch::GradMode::is_enabled() && rows > 0 &&
                          (kernels::SkinnyLinearSupported(x.reshape({rows, in}), layer->weight) ||
                           FusedLinearRuns(layer->weight));
  if (!IsCompact(layer->weight) && !row_kernel) {
    return torch::nn::functional::linear(x, layer->weight, layer->bias);
  }
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = layer->weight.size(0);
  return LinearRows(layer, x.reshape({rows, in}).contiguous()).view(shape);
}

torch::Tensor ForwardLinear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  if (!IsCompact(layer->weight)) return layer.ptr()->forward(x);
  return ApplyLinear(layer, x);
}

}  // namespace performer
