#include "core/builders/attention_builder.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/feature_maps/feature_map_catalogue.h"

namespace performer {

absl::StatusOr<ParamValue> AttentionParamFromJson(const std::string& name,
                                                  const nlohmann::json& value) {
  ParamValue scalar;
  if (ParamValueFromJsonScalar(value, &scalar)) return scalar;
  if (value.is_object() && value.contains("factory")) {
    absl::StatusOr<NamedFeatureMapFactory> factory = FeatureMapFactoryFromJson(value);
    if (!factory.ok()) return factory.status();
    return ParamValue(*std::move(factory));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Invalid value ", value.dump(), " for parameter '", name, "'"));
}

template <typename Module>
absl::Status BasicAttentionBuilder<Module>::Set(const std::string& name, const ParamValue& value) {
  if (!registry_->ContainsParameter(name)) {
    return absl::NotFoundError(
        absl::StrCat(ParamValue(name).Repr(), " is not a valid attention parameter name"));
  }
  absl::StatusOr<ParamValue> validated = registry_->ValidateParameter(name, value);
  if (!validated.ok()) return validated.status();
  parameters_[name] = *std::move(validated);
  return absl::OkStatus();
}

template <typename Module>
absl::StatusOr<ParamValue> BasicAttentionBuilder<Module>::Get(const std::string& name) const {
  auto it = parameters_.find(name);
  if (it == parameters_.end()) {
    return absl::NotFoundError(
        absl::StrCat("the attention parameter ", ParamValue(name).Repr(), " has not been set"));
  }
  return it->second;
}

template <typename Module>
bool BasicAttentionBuilder<Module>::ValidateAttentionType(const std::string& attention_type) const {
  for (absl::string_view stage : absl::StrSplit(attention_type, ':')) {
    for (absl::string_view name : absl::StrSplit(stage, ',')) {
      if (!registry_->Contains(std::string(name))) return false;
    }
  }
  return true;
}

template <typename Module>
absl::StatusOr<typename BasicAttentionBuilder<Module>::ModulePtr>
BasicAttentionBuilder<Module>::Build(const std::string& attention_type) const {
  const std::vector<std::string> stages = absl::StrSplit(attention_type, ':');
  std::vector<ModulePtr> modules;
  for (auto stage = stages.rbegin(); stage != stages.rend(); ++stage) {
    std::vector<ModulePtr> built;
    for (absl::string_view name : absl::StrSplit(*stage, ',')) {
      absl::StatusOr<ModulePtr> module = registry_->Create(std::string(name), modules, parameters_);
      if (!module.ok()) return module.status();
      built.push_back(*std::move(module));
    }
    modules = std::move(built);
  }
  if (modules.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Invalid attention_type argument ", ParamValue(attention_type).Repr()));
  }
  return modules.front();
}

template <typename Module>
absl::StatusOr<BasicAttentionBuilder<Module>> BasicAttentionBuilder<Module>::FromDictionary(
    const std::vector<std::pair<std::string, ParamValue>>& items, bool strict) {
  return FromDictionary(GlobalRegistryFor<Module>(), items, strict);
}

template <typename Module>
absl::StatusOr<BasicAttentionBuilder<Module>> BasicAttentionBuilder<Module>::FromDictionary(
    const RegistryType& registry, const std::vector<std::pair<std::string, ParamValue>>& items,
    bool strict) {
  BasicAttentionBuilder builder(registry);
  for (const auto& [name, value] : items) {
    absl::Status status = builder.Set(name, value);
    if (absl::IsNotFound(status)) {
      if (!strict) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("The builder has no parameter ", ParamValue(name).Repr()));
    }
    if (!status.ok()) return status;
  }
  return builder;
}

template <typename Module>
absl::StatusOr<BasicAttentionBuilder<Module>> BasicAttentionBuilder<Module>::FromJson(
    const nlohmann::json& object, bool strict) {
  return FromJson(GlobalRegistryFor<Module>(), object, strict);
}

template <typename Module>
absl::StatusOr<BasicAttentionBuilder<Module>> BasicAttentionBuilder<Module>::FromJson(
    const RegistryType& registry, const nlohmann::json& object, bool strict) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention builder parameters must be a JSON object, got ", object.dump()));
  }
  BasicAttentionBuilder builder(registry);
  for (auto it = object.begin(); it != object.end(); ++it) {
    // Item by item, as FromDictionary: an unknown name is judged before its
    // value is converted.
    if (!registry.ContainsParameter(it.key())) {
      if (!strict) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("The builder has no parameter ", ParamValue(it.key()).Repr()));
    }
    absl::StatusOr<ParamValue> value = AttentionParamFromJson(it.key(), it.value());
    if (!value.ok()) return value.status();
    absl::Status status = builder.Set(it.key(), *value);
    if (!status.ok()) return status;
  }
  return builder;
}

template class BasicAttentionBuilder<AttentionImpl>;
template class BasicAttentionBuilder<RecurrentAttentionImpl>;
template class BasicAttentionBuilder<RecurrentCrossAttentionImpl>;

}  // namespace performer
