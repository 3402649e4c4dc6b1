// Attention builders, as fast-transformers' AttentionBuilder,
// RecurrentAttentionBuilder and RecurrentCrossAttentionBuilder: a flat bag of
// attention parameters validated against one registry, and Build(type) that
// constructs an attention from a type string.
//
//   builder.Set(name, value)   name must be a parameter of the registry; the
//                              validated (coerced) value is stored: topk=None
//                              stores 32, topk=3.7 stores 3
//   builder.Get(name)          the stored value; never set -> NotFound
//   Build("a:b,c")             stages split on ':' are built innermost
//                              (last) first; each stage is split on ',' and
//                              every name in it is constructed with the
//                              previous stage's modules as positional
//                              arguments and every registered parameter of
//                              its type (unset -> spec default, or an error
//                              for required ones); the outermost stage must
//                              yield exactly one module
//
// Python exceptions map to absl codes as follows:
//   ValueError     -> InvalidArgument  ("Invalid value 'abc' for parameter
//                     'attention_dropout'", "Unknown attention type 'x'",
//                     "Invalid attention_type argument 'full,linear'",
//                     "The builder has no parameter 'x'")
//   AttributeError -> NotFound         ("'x' is not a valid attention parameter
//                     name"; Get of a parameter never set)
//   TypeError      -> FailedPrecondition (a wrong composition, e.g.
//                     "ConditionalFullAttention.__init__() missing 1 required
//                     positional argument: 'other_attention'")
//
// Unlike the Python builder (whose parameter dict is a defaultdict that
// Build() fills with None), Get() of a parameter that was never Set() stays
// NotFound after Build().
//
// The builder refers to its registry (by default the global one of its
// module type), so types registered later are buildable. Not thread-safe for
// concurrent Set(); Build() is const.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/attention/attention_registries.h"
#include "core/registry/param_value.h"
#include "core/registry/registry.h"

namespace performer {

// The process-wide registry of a module type (see attention_registries.h).
template <typename Module>
Registry<Module>& GlobalRegistryFor();
template <>
inline Registry<AttentionImpl>& GlobalRegistryFor<AttentionImpl>() {
  return GlobalAttentionRegistry();
}
template <>
inline Registry<RecurrentAttentionImpl>& GlobalRegistryFor<RecurrentAttentionImpl>() {
  return GlobalRecurrentAttentionRegistry();
}
template <>
inline Registry<RecurrentCrossAttentionImpl>& GlobalRegistryFor<RecurrentCrossAttentionImpl>() {
  return GlobalRecurrentCrossAttentionRegistry();
}

template <typename Module>
class BasicAttentionBuilder {
 public:
  using RegistryType = Registry<Module>;
  using ModulePtr = std::shared_ptr<Module>;

  // A builder over the global registry of Module.
  BasicAttentionBuilder() : BasicAttentionBuilder(GlobalRegistryFor<Module>()) {}
  // A builder over `registry`, which must outlive the builder.
  explicit BasicAttentionBuilder(const RegistryType& registry) : registry_(&registry) {}

  // builder.<name> = value. NotFound("'x' is not a valid attention parameter
  // name") for a name the registry does not know; InvalidArgument("Invalid
  // value ... for parameter '...'") for a value its spec refuses.
  absl::Status Set(const std::string& name, const ParamValue& value);

  // The stored (validated) value; NotFound when it was never set.
  absl::StatusOr<ParamValue> Get(const std::string& name) const;

  // Every parameter set so far, by name.
  const ParamMap& parameters() const { return parameters_; }

  // The registry's type names, in registration order.
  std::vector<std::string> available_attentions() const { return registry_->keys(); }

  // True when every ','-separated name of every ':'-separated stage exists
  // ("full,linear" is valid here but fails in Build()).
  bool ValidateAttentionType(const std::string& attention_type) const;

  // A new module for `attention_type` (see the header comment).
  absl::StatusOr<ModulePtr> Build(const std::string& attention_type) const;

  const RegistryType& registry() const { return *registry_; }

  // A builder with each (name, value) Set in order. An unknown name fails
  // with InvalidArgument("The builder has no parameter 'x'") when strict and
  // is skipped otherwise; invalid values always fail.
  static absl::StatusOr<BasicAttentionBuilder> FromDictionary(
      const std::vector<std::pair<std::string, ParamValue>>& items, bool strict = true);
  static absl::StatusOr<BasicAttentionBuilder> FromDictionary(
      const RegistryType& registry, const std::vector<std::pair<std::string, ParamValue>>& items,
      bool strict = true);

  // FromDictionary of a JSON object (in its iteration order). Scalars become
  // ParamValues; an object {"factory": <class>, "kwargs": {...}} becomes a
  // feature-map factory (FeatureMapFactoryFromJson). Other values, or a JSON
  // value that is not an object, are InvalidArgument.
  static absl::StatusOr<BasicAttentionBuilder> FromJson(const nlohmann::json& object,
                                                        bool strict = true);
  static absl::StatusOr<BasicAttentionBuilder> FromJson(const RegistryType& registry,
                                                        const nlohmann::json& object,
                                                        bool strict = true);

 private:
  const RegistryType* registry_;
  ParamMap parameters_;
};

using AttentionBuilder = BasicAttentionBuilder<AttentionImpl>;
using RecurrentAttentionBuilder = BasicAttentionBuilder<RecurrentAttentionImpl>;
using RecurrentCrossAttentionBuilder = BasicAttentionBuilder<RecurrentCrossAttentionImpl>;

extern template class BasicAttentionBuilder<AttentionImpl>;
extern template class BasicAttentionBuilder<RecurrentAttentionImpl>;
extern template class BasicAttentionBuilder<RecurrentCrossAttentionImpl>;

// A builder-parameter value from JSON: a scalar, or {"factory", "kwargs"} for
// a feature-map factory. `name` is used in messages.
absl::StatusOr<ParamValue> AttentionParamFromJson(const std::string& name,
                                                  const nlohmann::json& value);

}  // namespace performer
