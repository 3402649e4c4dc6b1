#include "core/models/linear_rows.h"

#include "kernels/skinny_linear.h"

namespace performer::models {
namespace {

// Up to this many rows the skinny kernel (which streams W once) beats
// OpenBLAS's packed sgemm; without it, one gemv per row does up to 4.
constexpr int64_t kMaxSkinnyRows = 64;
constexpr int64_t kMaxGemvRows = 4;

}  // namespace

torch::Tensor LinearRows(const torch::Tensor& weight, const torch::Tensor& bias,
                         const torch::Tensor& x) {
  const int64_t rows = x.size(0);
  if (rows <= kMaxSkinnyRows && kernels::SkinnyLinearSupported(x, weight)) {
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
  return LinearRows(layer->weight, layer->bias, x);
}

}  // namespace performer::models
