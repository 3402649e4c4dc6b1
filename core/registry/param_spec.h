// Typed parameter specifications, as in fast-transformers' attention
// registry: each spec validates a value and returns it in canonical form,
// coercing like Python's int()/float()/bool().
//
//   Int            int(x): truncates floats, parses integer strings; None fails
//   Float          float(x): ints and numeric strings accepted
//   Bool           bool(x): truthiness (the string "False" is true)
//   Callable       a feature-map factory
//   EventDispatcherInstance   a dispatcher key (string)
//   Optional(spec, default)   None -> default, else spec
//   Choice(values)            the value must be one of values
//   Custom(name, predicate)   user predicate returning the canonical value
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/registry/param_value.h"

namespace performer {

class ParamSpec {
 public:
  virtual ~ParamSpec() = default;
  // The canonical value, or an error saying why the value does not fit.
  virtual absl::StatusOr<ParamValue> Get(const ParamValue& value) const = 0;
  // Spec equality as in Python: plain specs compare by type, Optional by
  // inner spec and default, Choice by its choices, Custom by identity.
  virtual bool Equals(const ParamSpec& other) const = 0;
  // A readable form such as "Optional[Int, 32]".
  virtual std::string Describe() const = 0;
  // True when Get succeeds.
  bool Check(const ParamValue& value) const { return Get(value).ok(); }
};

using ParamSpecPtr = std::shared_ptr<const ParamSpec>;

ParamSpecPtr IntSpec();
ParamSpecPtr FloatSpec();
ParamSpecPtr BoolSpec();
ParamSpecPtr CallableSpec();
ParamSpecPtr EventDispatcherInstanceSpec();
ParamSpecPtr OptionalSpec(ParamSpecPtr inner, ParamValue default_value = ParamValue());
ParamSpecPtr ChoiceSpec(std::vector<ParamValue> choices);
ParamSpecPtr CustomSpec(std::string name,
                        std::function<absl::StatusOr<ParamValue>(const ParamValue&)> predicate);

}  // namespace performer
