// Python-style introspection of our modules: a class name (the reference
// library's, e.g. "LinearAttention") and named scalar attributes (e.g.
// "softmax_temp", "eps"). Builders' tests inspect built models with it, and
// it documents what each module was configured with.
#pragma once

#include <optional>
#include <string>

#include "core/registry/param_value.h"

namespace performer {

class Introspectable {
 public:
  virtual ~Introspectable() = default;
  // The class name in the reference library.
  virtual std::string class_name() const = 0;
  // A constructor setting by its Python attribute name, or nullopt.
  virtual std::optional<ParamValue> attribute(const std::string& name) const {
    return std::nullopt;
  }
};

}  // namespace performer
