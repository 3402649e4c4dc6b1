#include "core/feature_maps/performer_kernels.h"

#include <torch/torch.h>

#include <cmath>

#include "kernels/favor_features.h"

namespace performer {

torch::Tensor ApplyKernelFunction(KernelFunction fn, const torch::Tensor& x) {
  switch (fn) {
    case KernelFunction::kReLU:
      return torch::relu(x);
    case KernelFunction::kGELU:
      return torch::gelu(x);
    case KernelFunction::kSiLU:
      return torch::silu(x);
    case KernelFunction::kSigmoid:
      return torch::sigmoid(x);
    case KernelFunction::kTanh:
      return torch::tanh(x);
    case KernelFunction::kSoftplus:
      return torch::softplus(x);
    case KernelFunction::kELU:
      return torch::elu(x);
    case KernelFunction::kIdentity:
      return x;
  }
  return x;
}

namespace {
double DataNormalizer(const torch::Tensor& x) {
  return std::pow(static_cast<double>(x.size(-1)), -0.25);
}
}  // namespace

torch::Tensor ProjectFeatures(const torch::Tensor& x, const torch::Tensor& projection) {
  return torch::matmul(x * DataNormalizer(x), projection.t());
}

torch::Tensor SoftmaxKernelDiag(const torch::Tensor& x) {
  const double c = DataNormalizer(x);
  return ((x * x).sum(-1) / 2.0 * (c * c)).unsqueeze(-1);
}

torch::Tensor SoftmaxKernelQuery(const torch::Tensor& x, const torch::Tensor& projection) {
  const double ratio = std::pow(static_cast<double>(projection.size(0)), -0.5);
  torch::Tensor u = ProjectFeatures(x, projection);
  torch::Tensor diag = SoftmaxKernelDiag(x);
  // The stabilisers are constants for autograd, as in the reference (.detach()).
  return ratio * (torch::exp(u - diag - u.amax(-1, /*keepdim=*/true).detach()) + kSoftmaxKernelEps);
}

SoftmaxKeyExponents ComputeSoftmaxKeyExponents(const torch::Tensor& x,
                                               const torch::Tensor& projection,
                                               const torch::Tensor& floor) {
  torch::Tensor u = ProjectFeatures(x, projection);
  torch::Tensor stabiliser = u.amax({-1, -2}).detach();
  if (floor.defined()) stabiliser = torch::maximum(floor, stabiliser);
  return {torch::exp(u - SoftmaxKernelDiag(x) - stabiliser.unsqueeze(-1).unsqueeze(-1)),
          stabiliser};
}

torch::Tensor SoftmaxKernelKey(const torch::Tensor& x, const torch::Tensor& projection) {
  const double ratio = std::pow(static_cast<double>(projection.size(0)), -0.5);
  return ratio * (ComputeSoftmaxKeyExponents(x, projection).exponents + kSoftmaxKernelEps);
}

torch::Tensor GeneralizedKernel(const torch::Tensor& x, const torch::Tensor& projection,
                                KernelFunction fn) {
  return ApplyKernelFunction(fn, ProjectFeatures(x, projection)) + kGeneralizedKernelEps;
}

namespace {

// Whether the fused kernel computes `map` for x: inference only (it
// detaches everything), and it fuses the softmax and the ReLU generalized
// kernels.
bool Fused(const PerformerFeatureMap& map, const torch::Tensor& x) {
  if (torch::GradMode::is_enabled() && x.requires_grad()) return false;
  return map.kind == FeatureKind::kSoftmax ||
         (map.kind == FeatureKind::kGeneralized && map.kernel_fn == KernelFunction::kReLU);
}

torch::Tensor PerformerFeatures(const PerformerFeatureMap& map, const torch::Tensor& x,
                                const torch::Tensor& projection, bool is_query) {
  switch (map.kind) {
    case FeatureKind::kNoProjection:
      if (is_query) return x.softmax(-1);
      return map.causal ? x.exp() : x.softmax(-2);
    case FeatureKind::kGeneralized:
      if (Fused(map, x)) {
        return kernels::GeneralizedKernelFeatures(x, projection, kGeneralizedKernelEps);
      }
      return GeneralizedKernel(x, projection, map.kernel_fn);
    case FeatureKind::kSoftmax:
      break;
  }
  if (Fused(map, x)) {
    return kernels::SoftmaxKernelFeatures(x, projection, is_query, kSoftmaxKernelEps);
  }
  return is_query ? SoftmaxKernelQuery(x, projection) : SoftmaxKernelKey(x, projection);
}

}  // namespace

torch::Tensor PerformerQueryFeatures(const PerformerFeatureMap& map, const torch::Tensor& x,
                                     const torch::Tensor& projection) {
  return PerformerFeatures(map, x, projection, /*is_query=*/true);
}

torch::Tensor PerformerKeyFeatures(const PerformerFeatureMap& map, const torch::Tensor& x,
                                   const torch::Tensor& projection) {
  return PerformerFeatures(map, x, projection, /*is_query=*/false);
}

}  // namespace performer
