#include "tests/testing/gradcheck.h"

#include <torch/torch.h>

#include <sstream>

#include "tests/testing/fixtures.h"

namespace performer::testing {

std::optional<std::string> GradCheck(const TensorFunction& fn,
                                     const std::vector<torch::Tensor>& inputs,
                                     const std::vector<bool>& differentiable, double eps,
                                     double atol, double rtol) {
  auto checked = [&](size_t i) {
    return inputs[i].is_floating_point() && (differentiable.empty() || differentiable[i]);
  };
  std::vector<torch::Tensor> leaves;
  for (size_t i = 0; i < inputs.size(); ++i) {
    torch::Tensor x = inputs[i].detach().clone();
    if (x.is_floating_point()) x = x.to(torch::kDouble);
    if (checked(i)) x.requires_grad_(true);
    leaves.push_back(x);
  }
  torch::Tensor out = fn(leaves);
  if (!out.requires_grad()) return std::string("the output does not require grad");
  const torch::Tensor weight = torch::randn_like(out.detach());
  std::vector<torch::Tensor> wrt;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (checked(i)) wrt.push_back(leaves[i]);
  }
  std::vector<torch::Tensor> analytic =
      torch::autograd::grad({(out * weight).sum()}, wrt, {}, false, false, true);

  torch::NoGradGuard no_grad;
  auto objective = [&] { return (fn(leaves) * weight).sum().item<double>(); };
  size_t next = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!checked(i)) continue;
    torch::Tensor grad = analytic[next++];
    if (!grad.defined()) grad = torch::zeros_like(leaves[i]);
    torch::Tensor numeric = torch::zeros_like(leaves[i]);
    torch::Tensor flat = leaves[i].detach().view(-1);
    torch::Tensor numeric_flat = numeric.view(-1);
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double original = flat[j].item<double>();
      flat[j] = original + eps;
      const double plus = objective();
      flat[j] = original - eps;
      const double minus = objective();
      flat[j] = original;
      numeric_flat[j] = (plus - minus) / (2 * eps);
    }
    if (auto mismatch = CompareTensors(grad, numeric, atol, rtol)) {
      std::ostringstream s;
      s << "input " << i << ": analytic vs numeric gradient: " << *mismatch;
      return s.str();
    }
  }
  return std::nullopt;
}

}  // namespace performer::testing
