// Named constructors of the built-in feature maps, the C++ analogue of
// `Favor.factory(n_dims=256)`: a factory is a callable of query_dims.
//
//   class name                     kwargs (defaults as in the reference)
//   elu_feature_map                -
//   ActivationFunctionFeatureMap   activation_function (a name, required; see
//                                  activation_feature_map.h)
//   RandomFourierFeatures          n_dims, softmax_temp, orthogonal=false, redraw=1,
//                                  deterministic_eval=false
//   SmoothedRandomFourierFeatures  + smoothing=1.0
//   Favor                          n_dims, softmax_temp, orthogonal=true, stabilize=false,
//                                  redraw, deterministic_eval
//   GeneralizedRandomFeatures      n_dims, softmax_temp=1.0, orthogonal=true, kernel_fn="relu",
//                                  redraw, deterministic_eval
//
// Values are not coerced (as Python passes kwargs through): n_dims and redraw
// are JSON integers (n_dims may be null), softmax_temp a number or null,
// smoothing a number, flags booleans, kernel_fn / activation_function names
// (relu, exp, elu, elu_plus_one, identity, softplus, abs, sigmoid, tanh).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"
#include "core/registry/param_value.h"

namespace performer {

// elu(x) + 1, the default feature map of every linear attention.
NamedFeatureMapFactory EluFeatureMapFactory();

// A factory for `class_name` with keyword arguments `kwargs` (a JSON object;
// null = none). Unknown classes or keywords and ill-typed values are
// InvalidArgument errors naming them.
absl::StatusOr<NamedFeatureMapFactory> MakeFeatureMapFactory(const std::string& class_name,
                                                             const nlohmann::json& kwargs);

// The {"factory": <class>, "kwargs": {...}} form used by fixtures and
// model/builder JSON.
absl::StatusOr<NamedFeatureMapFactory> FeatureMapFactoryFromJson(const nlohmann::json& spec);

}  // namespace performer
