// A registry of module types by name, with one global parameter table, as
// fast-transformers' AttentionRegistry: a name maps to a class and the
// ordered list of parameters it takes, and each parameter name has exactly
// one spec shared by every class of the registry.
//
// Three registries exist (see core/attention/attention_registries.h): batch
// attentions, recurrent self attentions and recurrent cross attentions. User
// code registers new types with Register().
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/registry/param_spec.h"
#include "core/registry/param_value.h"

namespace performer {

// Validated parameter values by name.
using ParamMap = std::map<std::string, ParamValue>;

// How a registered class is constructed. `positional` holds the modules of
// the previous stage of a composed type string ("conditional-full:linear"
// gives conditional-full one positional module); `params` holds the value of
// every registered parameter of the class, already validated.
template <typename Module>
using ModuleCreator = std::function<absl::StatusOr<std::shared_ptr<Module>>(
    const std::vector<std::shared_ptr<Module>>& positional, const ParamMap& params)>;

template <typename Module>
struct RegistryEntry {
  std::string name;
  std::string class_name;  // e.g. "FullAttention"; used in messages.
  // The constructor's arguments in order, Python style. Positional modules
  // fill them from the front, so a decorator lists its wrapped module first.
  std::vector<std::string> constructor_args;
  // How many leading constructor_args are required positional modules.
  int required_positional = 0;
  std::vector<std::string> parameters;  // Registered parameter names, in order.
  ModuleCreator<Module> create;
};

template <typename Module>
class Registry {
 public:
  // Registers `name`. Fails with InvalidArgument when the name exists or a
  // parameter is already registered with a different spec.
  absl::Status Register(const std::string& name, const std::string& class_name,
                        std::vector<std::pair<std::string, ParamSpecPtr>> parameters,
                        ModuleCreator<Module> create,
                        std::vector<std::string> constructor_args = {},
                        int required_positional = 0) {
    if (entries_.count(name) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " is already registered"));
    }
    for (const auto& [param, spec] : parameters) {
      auto it = specs_.find(param);
      if (it != specs_.end() && !it->second->Equals(*spec)) {
        return absl::InvalidArgumentError(absl::StrCat(param, " is already registered with spec ",
                                                       it->second->Describe(), " instead of ",
                                                       spec->Describe()));
      }
    }
    RegistryEntry<Module> entry;
    entry.name = name;
    entry.class_name = class_name;
    entry.required_positional = required_positional;
    entry.create = std::move(create);
    for (auto& [param, spec] : parameters) {
      specs_.emplace(param, spec);
      entry.parameters.push_back(param);
    }
    entry.constructor_args =
        constructor_args.empty() ? entry.parameters : std::move(constructor_args);
    order_.push_back(name);
    entries_.emplace(name, std::move(entry));
    return absl::OkStatus();
  }

  bool Contains(const std::string& name) const { return entries_.count(name) > 0; }
  const RegistryEntry<Module>* Find(const std::string& name) const {
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  // Names in registration order.
  const std::vector<std::string>& keys() const { return order_; }
  bool ContainsParameter(const std::string& param) const { return specs_.count(param) > 0; }
  ParamSpecPtr Spec(const std::string& param) const {
    auto it = specs_.find(param);
    return it == specs_.end() ? nullptr : it->second;
  }

  // spec.Get(value); any failure becomes
  // InvalidArgument("Invalid value <repr> for parameter '<name>'").
  absl::StatusOr<ParamValue> ValidateParameter(const std::string& param,
                                               const ParamValue& value) const {
    auto it = specs_.find(param);
    absl::StatusOr<ParamValue> result =
        it == specs_.end() ? absl::NotFoundError("unknown parameter") : it->second->Get(value);
    if (!result.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Invalid value ", value.Repr(), " for parameter '", param, "'"));
    }
    return result;
  }

  // Constructs `name` with positional modules and the given (unvalidated)
  // parameter values; parameters not given take their spec's default.
  // Errors: InvalidArgument for invalid values or an unknown name,
  // FailedPrecondition (Python's TypeError) for a wrong composition.
  absl::StatusOr<std::shared_ptr<Module>> Create(
      const std::string& name, const std::vector<std::shared_ptr<Module>>& positional,
      const ParamMap& given) const {
    const RegistryEntry<Module>* entry = Find(name);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("Unknown attention type '", name, "'"));
    }
    const int n_positional = static_cast<int>(positional.size());
    if (n_positional < entry->required_positional) {
      std::vector<std::string> missing(
          entry->constructor_args.begin() + n_positional,
          entry->constructor_args.begin() + entry->required_positional);
      return absl::FailedPreconditionError(
          absl::StrCat(entry->class_name, ".__init__() missing ", missing.size(),
                       " required positional argument", missing.size() == 1 ? "" : "s", ": ",
                       absl::StrJoin(missing, " and ", [](std::string* out, const std::string& s) {
                         absl::StrAppend(out, "'", s, "'");
                       })));
    }
    if (n_positional > static_cast<int>(entry->constructor_args.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat(entry->class_name, ".__init__() takes ", entry->constructor_args.size() + 1,
                       " positional arguments but ", n_positional + 1, " were given"));
    }
    for (int i = 0; i < n_positional; ++i) {
      const std::string& arg = entry->constructor_args[i];
      for (const std::string& p : entry->parameters) {
        if (p == arg) {
          return absl::FailedPreconditionError(absl::StrCat(
              entry->class_name, ".__init__() got multiple values for argument '", arg, "'"));
        }
      }
    }
    ParamMap params;
    for (const std::string& p : entry->parameters) {
      auto it = given.find(p);
      absl::StatusOr<ParamValue> v =
          ValidateParameter(p, it == given.end() ? ParamValue() : it->second);
      if (!v.ok()) return v.status();
      params.emplace(p, *std::move(v));
    }
    return entry->create(positional, params);
  }

 private:
  std::map<std::string, RegistryEntry<Module>> entries_;
  std::vector<std::string> order_;
  std::map<std::string, ParamSpecPtr> specs_;
};

}  // namespace performer
