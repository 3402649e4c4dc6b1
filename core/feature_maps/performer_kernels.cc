#include "core/feature_maps/performer_kernels.h"

#include <cmath>

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

}  // namespace performer
