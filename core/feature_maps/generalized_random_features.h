// Generalized random features of Performers, as fast-transformers'
// GeneralizedRandomFeatures:
//
//   xs  = x * sqrt(t)       skipped when t == 1.0 exactly (the default)
//   phi = kernel_fn(xs . omega)       omega: (E, n_dims); output: n_dims
//
// The reference builds its RandomFourierFeatures parent with 2 * n_dims, so
// omega has n_dims columns and the Python attribute n_dims is 2 * n_dims.
//
// GeneralizedRandomFeatures(query_dimensions, options):
//   n_dims              unset -> query_dimensions (0 -> omega (E, E/2), as
//                       the reference's `2*0 or E`)
//   softmax_temp = 1.0  unset -> 1/sqrt(query_dimensions) (the parent's rule)
//   orthogonal = true   omega from FillOrthogonalRandomMatrix
//   kernel_fn = relu    an elementwise function by name (ActivationByName:
//                       relu, exp, elu, elu_plus_one, identity, softplus,
//                       abs, sigmoid, tanh) or any NamedActivation
//   redraw = 1, deterministic_eval = false   (see random_fourier_features.h)
#pragma once

#include <torch/arg.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/feature_maps/activation_feature_map.h"
#include "core/feature_maps/random_fourier_features.h"

namespace performer {

struct GeneralizedRandomFeaturesOptions {
  TORCH_ARG(std::optional<int64_t>, n_dims);
  TORCH_ARG(std::optional<double>, softmax_temp) = 1.0;
  TORCH_ARG(bool, orthogonal) = true;
  // An empty function means relu.
  TORCH_ARG(NamedActivation, kernel_fn);
  TORCH_ARG(int64_t, redraw) = 1;
  TORCH_ARG(bool, deterministic_eval) = false;
};

class GeneralizedRandomFeaturesImpl : public RandomFourierFeaturesImpl {
 public:
  explicit GeneralizedRandomFeaturesImpl(int64_t query_dimensions,
                                         const GeneralizedRandomFeaturesOptions& options = {});

  torch::Tensor forward(const torch::Tensor& x) override;
  int64_t output_dims() const override { return n_dims() / 2; }

  std::string class_name() const override { return "GeneralizedRandomFeatures"; }
  // The RandomFourierFeatures attributes and "kernel_fn" (its name).
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const NamedActivation& kernel_fn() const { return kernel_fn_; }

 private:
  NamedActivation kernel_fn_;
};

TORCH_MODULE(GeneralizedRandomFeatures);

}  // namespace performer
