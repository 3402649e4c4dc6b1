#include "core/feature_maps/feature_map_catalogue.h"

#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/feature_maps/activation_feature_map.h"
#include "core/feature_maps/favor.h"
#include "core/feature_maps/generalized_random_features.h"
#include "core/feature_maps/random_fourier_features.h"

namespace performer {
namespace {

// Typed access to the keyword arguments of one class. Values are not coerced:
// the reference passes kwargs to the constructor as they are.
class Kwargs {
 public:
  Kwargs(std::string class_name, const nlohmann::json& kwargs)
      : class_name_(std::move(class_name)), kwargs_(kwargs) {}

  // InvalidArgument naming the first keyword not in `accepted`.
  absl::Status CheckKnown(const std::vector<std::string>& accepted) const {
    const std::set<std::string> known(accepted.begin(), accepted.end());
    for (const auto& item : kwargs_.items()) {
      if (known.count(item.key()) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "feature map ", class_name_, ": unknown keyword argument '", item.key(), "'",
            accepted.empty() ? std::string("; it takes none")
                             : absl::StrCat("; accepted: ", absl::StrJoin(accepted, ", "))));
      }
    }
    return absl::OkStatus();
  }

  // An integer >= minimum, or null / absent (left unset).
  absl::Status OptionalInt(const std::string& key, int64_t minimum,
                           std::optional<int64_t>* out) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr || value->is_null()) return absl::OkStatus();
    if (!value->is_number_integer()) return Invalid(key, "an integer or null", *value);
    const int64_t v = value->get<int64_t>();
    if (v < minimum) return Invalid(key, absl::StrCat("at least ", minimum), *value);
    *out = v;
    return absl::OkStatus();
  }

  absl::Status Int(const std::string& key, int64_t minimum, int64_t* out) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_number_integer()) return Invalid(key, "an integer", *value);
    const int64_t v = value->get<int64_t>();
    if (v < minimum) return Invalid(key, absl::StrCat("at least ", minimum), *value);
    *out = v;
    return absl::OkStatus();
  }

  // A number; null sets `out` to unset (the reference's None default).
  absl::Status OptionalNumber(const std::string& key, std::optional<double>* out) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) return absl::OkStatus();
    if (value->is_null()) {
      out->reset();
      return absl::OkStatus();
    }
    if (!value->is_number()) return Invalid(key, "a number or null", *value);
    *out = value->get<double>();
    return absl::OkStatus();
  }

  absl::Status Number(const std::string& key, double* out) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_number()) return Invalid(key, "a number", *value);
    *out = value->get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const std::string& key, bool* out) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) return absl::OkStatus();
    if (!value->is_boolean()) return Invalid(key, "a boolean", *value);
    *out = value->get<bool>();
    return absl::OkStatus();
  }

  // A named elementwise function (see activation_feature_map.h).
  absl::Status Activation(const std::string& key, bool required, NamedActivation* out) const {
    const nlohmann::json* value = Find(key);
    if (value == nullptr) {
      if (!required) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrCat("feature map ", class_name_, ": missing keyword argument '", key, "'"));
    }
    if (!value->is_string()) return Invalid(key, "a function name (string)", *value);
    absl::StatusOr<NamedActivation> activation = ActivationByName(value->get<std::string>());
    if (!activation.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("feature map ", class_name_, ": keyword '",
                                                     key, "': ", activation.status().message()));
    }
    *out = *std::move(activation);
    return absl::OkStatus();
  }

 private:
  const nlohmann::json* Find(const std::string& key) const {
    auto it = kwargs_.find(key);
    return it == kwargs_.end() ? nullptr : &*it;
  }

  absl::Status Invalid(const std::string& key, const std::string& expected,
                       const nlohmann::json& value) const {
    return absl::InvalidArgumentError(absl::StrCat("feature map ", class_name_, ": keyword '", key,
                                                   "' must be ", expected, ", got ", value.dump()));
  }

  std::string class_name_;
  const nlohmann::json& kwargs_;
};

#define PERFORMER_RETURN_IF_ERROR_(expr)                   \
  do {                                                     \
    absl::Status performer_status_ = (expr);               \
    if (!performer_status_.ok()) return performer_status_; \
  } while (0)

using FactoryMaker = std::function<absl::StatusOr<FeatureMapFactory>(const Kwargs&)>;

absl::StatusOr<FeatureMapFactory> MakeElu(const Kwargs& kwargs) {
  PERFORMER_RETURN_IF_ERROR_(kwargs.CheckKnown({}));
  return FeatureMapFactory(
      [](int64_t query_dims) -> FeatureMapPtr { return MakeEluFeatureMap(query_dims); });
}

absl::StatusOr<FeatureMapFactory> MakeActivation(const Kwargs& kwargs) {
  PERFORMER_RETURN_IF_ERROR_(kwargs.CheckKnown({"activation_function"}));
  NamedActivation activation;
  PERFORMER_RETURN_IF_ERROR_(
      kwargs.Activation("activation_function", /*required=*/true, &activation));
  return FeatureMapFactory([activation](int64_t query_dims) -> FeatureMapPtr {
    return std::make_shared<ActivationFunctionFeatureMapImpl>(query_dims, activation);
  });
}

absl::StatusOr<FeatureMapFactory> MakeRff(const Kwargs& kwargs) {
  PERFORMER_RETURN_IF_ERROR_(
      kwargs.CheckKnown({"n_dims", "softmax_temp", "orthogonal", "redraw", "deterministic_eval"}));
  RandomFourierFeaturesOptions options;
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalInt("n_dims", 0, &options.n_dims()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalNumber("softmax_temp", &options.softmax_temp()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("orthogonal", &options.orthogonal()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Int("redraw", 1, &options.redraw()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("deterministic_eval", &options.deterministic_eval()));
  return FeatureMapFactory([options](int64_t query_dims) -> FeatureMapPtr {
    return std::make_shared<RandomFourierFeaturesImpl>(query_dims, options);
  });
}

absl::StatusOr<FeatureMapFactory> MakeSmoothedRff(const Kwargs& kwargs) {
  PERFORMER_RETURN_IF_ERROR_(kwargs.CheckKnown(
      {"n_dims", "softmax_temp", "orthogonal", "smoothing", "redraw", "deterministic_eval"}));
  SmoothedRandomFourierFeaturesOptions options;
  // n_dims - 1 features are random; 0 would make a negative size.
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalInt("n_dims", 1, &options.n_dims()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalNumber("softmax_temp", &options.softmax_temp()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("orthogonal", &options.orthogonal()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Number("smoothing", &options.smoothing()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Int("redraw", 1, &options.redraw()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("deterministic_eval", &options.deterministic_eval()));
  return FeatureMapFactory([options](int64_t query_dims) -> FeatureMapPtr {
    return std::make_shared<SmoothedRandomFourierFeaturesImpl>(query_dims, options);
  });
}

absl::StatusOr<FeatureMapFactory> MakeFavor(const Kwargs& kwargs) {
  PERFORMER_RETURN_IF_ERROR_(kwargs.CheckKnown(
      {"n_dims", "softmax_temp", "orthogonal", "stabilize", "redraw", "deterministic_eval"}));
  FavorOptions options;
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalInt("n_dims", 0, &options.n_dims()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalNumber("softmax_temp", &options.softmax_temp()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("orthogonal", &options.orthogonal()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("stabilize", &options.stabilize()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Int("redraw", 1, &options.redraw()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("deterministic_eval", &options.deterministic_eval()));
  return FeatureMapFactory([options](int64_t query_dims) -> FeatureMapPtr {
    return std::make_shared<FavorImpl>(query_dims, options);
  });
}

absl::StatusOr<FeatureMapFactory> MakeGrf(const Kwargs& kwargs) {
  PERFORMER_RETURN_IF_ERROR_(kwargs.CheckKnown(
      {"n_dims", "softmax_temp", "orthogonal", "kernel_fn", "redraw", "deterministic_eval"}));
  GeneralizedRandomFeaturesOptions options;
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalInt("n_dims", 0, &options.n_dims()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.OptionalNumber("softmax_temp", &options.softmax_temp()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("orthogonal", &options.orthogonal()));
  options.kernel_fn(*ActivationByName("relu"));
  PERFORMER_RETURN_IF_ERROR_(
      kwargs.Activation("kernel_fn", /*required=*/false, &options.kernel_fn()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Int("redraw", 1, &options.redraw()));
  PERFORMER_RETURN_IF_ERROR_(kwargs.Bool("deterministic_eval", &options.deterministic_eval()));
  return FeatureMapFactory([options](int64_t query_dims) -> FeatureMapPtr {
    return std::make_shared<GeneralizedRandomFeaturesImpl>(query_dims, options);
  });
}

const std::map<std::string, FactoryMaker>& Catalogue() {
  static const auto* catalogue = new std::map<std::string, FactoryMaker>{
      {"elu_feature_map", MakeElu},
      {"ActivationFunctionFeatureMap", MakeActivation},
      {"RandomFourierFeatures", MakeRff},
      {"SmoothedRandomFourierFeatures", MakeSmoothedRff},
      {"Favor", MakeFavor},
      {"GeneralizedRandomFeatures", MakeGrf},
  };
  return *catalogue;
}

}  // namespace

NamedFeatureMapFactory EluFeatureMapFactory() {
  return NamedFeatureMapFactory{"elu_feature_map", [](int64_t query_dims) -> FeatureMapPtr {
                                  return MakeEluFeatureMap(query_dims);
                                }};
}

absl::StatusOr<NamedFeatureMapFactory> MakeFeatureMapFactory(const std::string& class_name,
                                                             const nlohmann::json& kwargs) {
  const auto& catalogue = Catalogue();
  auto it = catalogue.find(class_name);
  if (it == catalogue.end()) {
    std::vector<std::string> known;
    for (const auto& entry : catalogue) known.push_back(entry.first);
    return absl::InvalidArgumentError(absl::StrCat("unknown feature map class '", class_name,
                                                   "'; known: ", absl::StrJoin(known, ", ")));
  }
  static const nlohmann::json kNoKwargs = nlohmann::json::object();
  if (!kwargs.is_null() && !kwargs.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feature map ", class_name, ": kwargs must be a JSON object, got ", kwargs.dump()));
  }
  absl::StatusOr<FeatureMapFactory> make =
      it->second(Kwargs(class_name, kwargs.is_null() ? kNoKwargs : kwargs));
  if (!make.ok()) return make.status();
  return NamedFeatureMapFactory{class_name, *std::move(make)};
}

absl::StatusOr<NamedFeatureMapFactory> FeatureMapFactoryFromJson(const nlohmann::json& spec) {
  if (!spec.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a feature map must be given as {\"factory\": <class>, \"kwargs\": {...}}, got ",
        spec.dump()));
  }
  for (const auto& item : spec.items()) {
    if (item.key() != "factory" && item.key() != "kwargs") {
      return absl::InvalidArgumentError(absl::StrCat("feature map spec: unknown key '", item.key(),
                                                     "'; accepted: factory, kwargs"));
    }
  }
  auto factory = spec.find("factory");
  if (factory == spec.end() || !factory->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "feature map spec: \"factory\" must be a class name (string), got ", spec.dump()));
  }
  auto kwargs = spec.find("kwargs");
  return MakeFeatureMapFactory(factory->get<std::string>(),
                               kwargs == spec.end() ? nlohmann::json() : *kwargs);
}

}  // namespace performer
