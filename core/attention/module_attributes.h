// Dotted attribute lookup through named submodules, as Python's
// `module.full_attention.dropout.p`: "child.rest" finds the child module
// registered as "child" and asks it for "rest". Introspectable children answer
// through attribute() ("__class__" gives their class_name()); a
// torch::nn::Dropout child answers "p" (and "__class__" = "Dropout").
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/dropout.h>

#include <optional>
#include <string>

#include "core/introspection.h"
#include "core/registry/param_value.h"

namespace performer {

inline std::optional<ParamValue> SubmoduleAttribute(const torch::nn::Module& module,
                                                    const std::string& dotted_name) {
  const size_t dot = dotted_name.find('.');
  if (dot == std::string::npos) return std::nullopt;
  const std::string child_name = dotted_name.substr(0, dot);
  const std::string rest = dotted_name.substr(dot + 1);
  for (const auto& child : module.named_children()) {
    if (child.key() != child_name) continue;
    if (const auto* dropout = dynamic_cast<const torch::nn::DropoutImpl*>(child.value().get())) {
      if (rest == "p") return ParamValue(dropout->options.p());
      if (rest == "__class__") return ParamValue("Dropout");
      return std::nullopt;
    }
    if (const auto* introspectable = dynamic_cast<const Introspectable*>(child.value().get())) {
      if (rest == "__class__") return ParamValue(introspectable->class_name());
      return introspectable->attribute(rest);
    }
    return SubmoduleAttribute(*child.value(), rest);
  }
  return std::nullopt;
}

}  // namespace performer
