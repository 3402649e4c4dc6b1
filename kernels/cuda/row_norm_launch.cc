#include "kernels/cuda/row_norm_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/row_norm_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {
namespace {

const float* OptionalData(const torch::Tensor& t) {
  return t.defined() ? t.data_ptr<float>() : nullptr;
}

torch::Tensor Launch(RowNormArgs a, const torch::Tensor& x) {
  torch::Tensor y = a.kind == RowNormKind::kSquaredNorm ? torch::empty({x.size(0), 1}, x.options())
                                                        : torch::empty_like(x);
  a.x = x.data_ptr<float>();
  a.y = y.data_ptr<float>();
  a.rows = x.size(0);
  a.cols = x.size(1);
  CheckLaunch(RowNormForward(a, CurrentStream(x)), "RowNorm");
  return y;
}

}  // namespace

torch::Tensor LayerNormRowsCuda(const torch::Tensor& x, const torch::Tensor& weight,
                                const torch::Tensor& bias, double eps) {
  RowNormArgs a{};
  a.kind = RowNormKind::kLayerNorm;
  a.weight = OptionalData(weight);
  a.bias = OptionalData(bias);
  a.eps = static_cast<float>(eps);
  return Launch(a, x);
}

torch::Tensor ScaleNormRowsCuda(const torch::Tensor& x, const torch::Tensor& scale, double eps) {
  RowNormArgs a{};
  a.kind = RowNormKind::kScaleNorm;
  a.scale = scale.data_ptr<float>();
  a.eps = static_cast<float>(eps);
  return Launch(a, x);
}

torch::Tensor SquaredNormRowsCuda(const torch::Tensor& x) {
  RowNormArgs a{};
  a.kind = RowNormKind::kSquaredNorm;
  return Launch(a, x);
}

}  // namespace performer::kernels::cuda
