#include "core/feature_maps/generalized_random_features.h"

#include <torch/torch.h>

#include <cmath>

namespace performer {

GeneralizedRandomFeaturesImpl::GeneralizedRandomFeaturesImpl(
    int64_t query_dimensions, const GeneralizedRandomFeaturesOptions& options)
    : RandomFourierFeaturesImpl(
          query_dimensions,
          // Doubled so that the parent's omega has n_dims columns.
          2 * (options.n_dims().has_value() ? *options.n_dims() : query_dimensions),
          options.softmax_temp(), options.orthogonal(), options.redraw(),
          options.deterministic_eval()),
      kernel_fn_(options.kernel_fn().fn ? options.kernel_fn() : *ActivationByName("relu")) {}

torch::Tensor GeneralizedRandomFeaturesImpl::forward(const torch::Tensor& x) {
  // The reference compares the temperature with 1.0 exactly.
  const torch::Tensor xs = softmax_temp() != 1.0 ? x * std::sqrt(softmax_temp()) : x;
  return kernel_fn_.fn(Project(xs));
}

std::optional<ParamValue> GeneralizedRandomFeaturesImpl::attribute(const std::string& name) const {
  if (name == "kernel_fn") return ParamValue(kernel_fn_.name);
  return RandomFourierFeaturesImpl::attribute(name);
}

}  // namespace performer
