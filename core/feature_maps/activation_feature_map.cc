#include "core/feature_maps/activation_feature_map.h"

#include <torch/torch.h>

#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer {
namespace {

using ActivationFn = std::function<torch::Tensor(const torch::Tensor&)>;

const std::map<std::string, ActivationFn>& ActivationTable() {
  static const auto* table = new std::map<std::string, ActivationFn>{
      {"elu_plus_one", [](const torch::Tensor& x) { return torch::elu(x) + 1; }},
      {"elu", [](const torch::Tensor& x) { return torch::elu(x); }},
      {"relu", [](const torch::Tensor& x) { return torch::relu(x); }},
      {"exp", [](const torch::Tensor& x) { return torch::exp(x); }},
      {"identity", [](const torch::Tensor& x) { return x; }},
      {"softplus", [](const torch::Tensor& x) { return torch::softplus(x); }},
      {"abs", [](const torch::Tensor& x) { return torch::abs(x); }},
      {"sigmoid", [](const torch::Tensor& x) { return torch::sigmoid(x); }},
      {"tanh", [](const torch::Tensor& x) { return torch::tanh(x); }},
  };
  return *table;
}

}  // namespace

NamedActivation EluPlusOneActivation() { return *ActivationByName("elu_plus_one"); }

std::vector<std::string> ActivationNames() {
  std::vector<std::string> names;
  for (const auto& entry : ActivationTable()) names.push_back(entry.first);
  return names;
}

absl::StatusOr<NamedActivation> ActivationByName(const std::string& name) {
  const auto& table = ActivationTable();
  auto it = table.find(name);
  if (it == table.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown activation function '", name,
                     "'; known: ", absl::StrJoin(ActivationNames(), ", ")));
  }
  return NamedActivation{it->first, it->second};
}

ActivationFunctionFeatureMapImpl::ActivationFunctionFeatureMapImpl(
    int64_t query_dims, NamedActivation activation_function)
    : FeatureMapImpl(query_dims), activation_function_(std::move(activation_function)) {
  TORCH_CHECK(activation_function_.fn, "ActivationFunctionFeatureMap: activation function '",
              activation_function_.name, "' is empty");
}

torch::Tensor ActivationFunctionFeatureMapImpl::forward(const torch::Tensor& x) {
  return activation_function_.fn(x);
}

std::optional<ParamValue> ActivationFunctionFeatureMapImpl::attribute(
    const std::string& name) const {
  if (name == "query_dims") return ParamValue(query_dims());
  if (name == "activation_function") return ParamValue(activation_function_.name);
  return std::nullopt;
}

std::shared_ptr<ActivationFunctionFeatureMapImpl> MakeEluFeatureMap(int64_t query_dims) {
  return std::make_shared<ActivationFunctionFeatureMapImpl>(query_dims, EluPlusOneActivation());
}

}  // namespace performer
