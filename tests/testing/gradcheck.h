// Finite-difference gradient check, in the spirit of torch.autograd.gradcheck
// (which the C++ API does not offer).
//
// For fn mapping the inputs to one output tensor, the analytic gradients of
// the scalar sum(fn(inputs) * w), w a fixed random tensor, are compared with
// central differences (f(x + eps) - f(x - eps)) / (2 eps) for every element of
// every input marked in `differentiable` (all by default). Everything runs in
// float64: the inputs are converted, so pass tiny sizes (the cost is two calls
// of fn per input element).
//
//   eps = 1e-6, atol = 1e-5, rtol = 1e-3 (torch.autograd.gradcheck defaults)
//
// Returns a description of the first mismatch, or nullopt when all agree.
#pragma once

#include <torch/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace performer::testing {

using TensorFunction = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

std::optional<std::string> GradCheck(const TensorFunction& fn,
                                     const std::vector<torch::Tensor>& inputs,
                                     const std::vector<bool>& differentiable = {},
                                     double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3);

}  // namespace performer::testing
