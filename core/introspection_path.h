// Python-style attribute paths on built modules, e.g.
//
//   InspectPath(model, "layers.0.attention.inner_attention.__class__") -> "LinearAttention"
//   InspectPath(model, "layers.0.attention.query_projection.weight.shape") -> [32, 128]
//   InspectPath(attention, "dropout.p") -> 0.1
//
// so that a built model can be compared with what the reference library
// reports for `getattr(model, "a").b.c`. Each dot-separated part is resolved
// against the current object:
//
//   module  "__class__"            the Python class name (PythonClassName below)
//           child name             a registered submodule ("layers", then "0" of a ModuleList)
//           parameter / buffer     a tensor registered directly on the module
//           attribute              Introspectable::attribute(part), then the dotted
//                                  remainder as one name (e.g. "dropout.p")
//           torch attribute        Linear in_features/out_features, LayerNorm
//                                  eps/normalized_shape/elementwise_affine, Dropout
//                                  p/inplace, Embedding num_embeddings/embedding_dim,
//                                  any module's "training"
//   tensor  "shape", "dtype", "ndim", "requires_grad"
//
// The result is a JSON value (strings, numbers, booleans, null, lists), so it
// compares directly with golden values. A path ending on a tensor gives its
// values as nested lists; a path ending on a module is an error (it has no
// value). An unresolved part is NotFound (Python's AttributeError) naming the
// part, the object it was looked up on and the whole path.
#pragma once

#include <torch/nn/module.h>

#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/statusor.h"

namespace performer {

// The reference library's class name of a module: Introspectable::class_name()
// for our modules; for LibTorch modules the Python name (torch::nn::LinearImpl
// -> "Linear", LayerNormImpl -> "LayerNorm", DropoutImpl -> "Dropout",
// ModuleListImpl -> "ModuleList"), i.e. the unqualified C++ name without
// "Impl".
std::string PythonClassName(const torch::nn::Module& module);

// Resolves `path` starting at `root` (see the header comment).
absl::StatusOr<nlohmann::json> InspectPath(const torch::nn::Module& root, const std::string& path);

}  // namespace performer
