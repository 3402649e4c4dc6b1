// Finite-difference gradient checks for the kernel tests (header-only).
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace performer::testing {

// Checks, for each input index in `differentiable`, that autograd's gradient
// of sum(f(inputs) * w) (w a fixed random weighting) matches central finite
// differences. Inputs must be float64 and small: f is evaluated twice per
// element.
inline void ExpectGradientsMatchFiniteDifferences(
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& f,
    const std::vector<torch::Tensor>& inputs, const std::vector<size_t>& differentiable,
    double eps = 1e-6, double tolerance = 1e-6) {
  std::vector<torch::Tensor> leaves;
  for (const torch::Tensor& input : inputs) leaves.push_back(input.detach().clone());
  for (size_t i : differentiable) leaves[i].set_requires_grad(true);
  torch::Tensor out = f(leaves);
  torch::Tensor weights = torch::randn(out.sizes(), out.options().requires_grad(false));
  (out * weights).sum().backward();

  for (size_t i : differentiable) {
    ASSERT_TRUE(leaves[i].grad().defined()) << "no gradient for input " << i;
    torch::Tensor analytic = leaves[i].grad();
    torch::Tensor numeric = torch::zeros_like(analytic);
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> probe;
    for (const torch::Tensor& input : inputs) probe.push_back(input.detach().clone());
    torch::Tensor flat = probe[i].view({-1});
    torch::Tensor numeric_flat = numeric.view({-1});
    for (int64_t e = 0; e < flat.numel(); ++e) {
      const double original = flat[e].item<double>();
      flat[e] = original + eps;
      const double plus = (f(probe) * weights).sum().item<double>();
      flat[e] = original - eps;
      const double minus = (f(probe) * weights).sum().item<double>();
      flat[e] = original;
      numeric_flat[e] = (plus - minus) / (2 * eps);
    }
    const double error = (analytic - numeric).abs().max().item<double>();
    EXPECT_LE(error, tolerance) << "gradient of input " << i << " differs from finite "
                                << "differences by " << error;
  }
}

}  // namespace performer::testing
