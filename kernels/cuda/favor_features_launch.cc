#include "kernels/cuda/favor_features_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor FavorFeaturesCuda(const torch::Tensor& data, const torch::Tensor& projection,
                                FavorMapKind map, double eps) {
  TORCH_CHECK(data.dim() == 3 && projection.dim() == 2 && projection.size(1) == data.size(2),
              "FavorFeatures: expected data (G, L, D) and projection (M, D), got ", data.sizes(),
              " and ", projection.sizes());
  FavorDtype dtype = FavorDtype::kFloat32;
  torch::ScalarType compute = torch::kFloat;
  if (data.scalar_type() == torch::kHalf) {
    dtype = FavorDtype::kFloat16;
    compute = torch::kHalf;
  } else if (data.scalar_type() == torch::kBFloat16) {
    dtype = FavorDtype::kBFloat16;
    compute = torch::kBFloat16;
  }
  const torch::Tensor x = data.to(compute).contiguous();
  const torch::Tensor p = projection.to(compute).contiguous();
  const int64_t groups = x.size(0), length = x.size(1), dims = x.size(2);
  const int64_t features = p.size(0), rows = groups * length;
  const torch::TensorOptions f32 = x.options().dtype(torch::kFloat);
  torch::Tensor out = torch::empty({groups, length, features}, x.options());
  // float32 computes u in the output itself; the half types need a workspace.
  torch::Tensor u = dtype == FavorDtype::kFloat32 ? out : torch::empty({rows, features}, f32);
  const bool softmax = map != FavorMapKind::kGeneralizedRelu;
  torch::Tensor diag, stabiliser;
  if (softmax) {
    diag = torch::empty({rows}, f32);
    stabiliser = torch::empty({map == FavorMapKind::kSoftmaxKey ? groups : rows}, f32);
  }
  FavorFeaturesArgs a{};
  a.dtype = dtype;
  a.map = map;
  a.data = x.data_ptr();
  a.projection = p.data_ptr();
  a.u = u.data_ptr<float>();
  a.diag = softmax ? diag.data_ptr<float>() : nullptr;
  a.stabiliser = softmax ? stabiliser.data_ptr<float>() : nullptr;
  a.out = out.data_ptr();
  a.groups = groups;
  a.length = length;
  a.dims = dims;
  a.features = features;
  a.eps = static_cast<float>(eps);
  CheckLaunch(FavorFeaturesForward(a, CurrentStream(x)), "FavorFeatures");
  return data.scalar_type() == compute ? out : out.to(data.scalar_type());
}

}  // namespace performer::kernels::cuda
