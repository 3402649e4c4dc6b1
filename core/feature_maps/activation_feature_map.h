// Deterministic feature maps that apply an elementwise function, as
// fast-transformers' ActivationFunctionFeatureMap and elu_feature_map:
//
//   phi(x) = f(x)       elementwise on (..., E); output (..., E)
//   elu_feature_map:    f(x) = elu(x) + 1 (alpha 1), the default feature map
//                       of every linear attention
//
// There is nothing to sample: new_feature_map() is a no-op and there are no
// buffers. Elementwise functions are named so that they can be configured from
// JSON and shown by introspection (attribute "activation_function").
//
// Named elementwise functions (ActivationByName), also used as the kernel_fn
// of GeneralizedRandomFeatures:
//   "elu_plus_one"  elu(x) + 1          "relu"      max(x, 0)
//   "elu"           elu(x), alpha 1     "exp"       exp(x)
//   "identity"      x                   "softplus"  log(1 + exp(x))
//   "abs"           |x|                 "sigmoid"   1 / (1 + exp(-x))
//   "tanh"          tanh(x)
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/feature_maps/feature_map.h"

namespace performer {

// An elementwise tensor function with the name it is configured by.
struct NamedActivation {
  std::string name;
  std::function<torch::Tensor(const torch::Tensor&)> fn;
};

// elu(x) + 1.
NamedActivation EluPlusOneActivation();

// One of the named functions listed above; InvalidArgument naming the
// unknown name and the known ones otherwise.
absl::StatusOr<NamedActivation> ActivationByName(const std::string& name);

// The names accepted by ActivationByName, sorted.
std::vector<std::string> ActivationNames();

class ActivationFunctionFeatureMapImpl : public FeatureMapImpl {
 public:
  ActivationFunctionFeatureMapImpl(int64_t query_dims, NamedActivation activation_function);

  // Deterministic: nothing to resample.
  void new_feature_map(torch::Device /*device*/) override {}
  torch::Tensor forward(const torch::Tensor& x) override;
  int64_t output_dims() const override { return query_dims(); }

  std::string class_name() const override { return "ActivationFunctionFeatureMap"; }
  // "query_dims", "activation_function" (the function's name).
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const NamedActivation& activation_function() const { return activation_function_; }

 private:
  NamedActivation activation_function_;
};

TORCH_MODULE(ActivationFunctionFeatureMap);

// The elu feature map, phi(x) = elu(x) + 1, for query_dims E.
std::shared_ptr<ActivationFunctionFeatureMapImpl> MakeEluFeatureMap(int64_t query_dims);

}  // namespace performer
