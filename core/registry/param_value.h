// A dynamically typed parameter value, the C++ analogue of the Python objects
// that fast-transformers' builders and registries pass around: None, bool,
// int, float, str, or a feature-map factory (a callable of query_dims).
//
// Values coming from JSON are converted with FromJson; a feature map is given
// in JSON as {"factory": "<class>", "kwargs": {...}} and resolved to a
// factory by the feature-map catalogue (see core/feature_maps/feature_map.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <variant>

namespace performer {

class FeatureMapImpl;
// Builds a feature map for a given query dimensionality (E).
using FeatureMapFactory = std::function<std::shared_ptr<FeatureMapImpl>(int64_t query_dims)>;

// A named factory: `name` is shown in messages and introspection.
struct NamedFeatureMapFactory {
  std::string name;
  FeatureMapFactory make;
};

class ParamValue {
 public:
  struct None {
    bool operator==(const None&) const { return true; }
  };
  using Storage = std::variant<None, bool, int64_t, double, std::string,
                               std::shared_ptr<NamedFeatureMapFactory>>;

  ParamValue() : value_(None{}) {}
  ParamValue(bool v) : value_(v) {}                      // NOLINT(google-explicit-constructor)
  ParamValue(int v) : value_(int64_t{v}) {}              // NOLINT
  ParamValue(int64_t v) : value_(v) {}                   // NOLINT
  ParamValue(double v) : value_(v) {}                    // NOLINT
  ParamValue(const char* v) : value_(std::string(v)) {}  // NOLINT
  ParamValue(std::string v) : value_(std::move(v)) {}    // NOLINT
  ParamValue(NamedFeatureMapFactory f)                   // NOLINT
      : value_(std::make_shared<NamedFeatureMapFactory>(std::move(f))) {}

  bool is_none() const { return std::holds_alternative<None>(value_); }
  bool is_bool() const { return std::holds_alternative<bool>(value_); }
  bool is_int() const { return std::holds_alternative<int64_t>(value_); }
  bool is_float() const { return std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  bool is_factory() const {
    return std::holds_alternative<std::shared_ptr<NamedFeatureMapFactory>>(value_);
  }

  // Accessors; calling the wrong one throws std::bad_variant_access.
  bool as_bool() const { return std::get<bool>(value_); }
  int64_t as_int() const { return std::get<int64_t>(value_); }
  double as_float() const { return std::get<double>(value_); }
  const std::string& as_string() const { return std::get<std::string>(value_); }
  const NamedFeatureMapFactory& as_factory() const {
    return *std::get<std::shared_ptr<NamedFeatureMapFactory>>(value_);
  }

  const Storage& storage() const { return value_; }

  // Python repr(): None, True, 3, 0.5, 'abc', <factory Favor>.
  std::string Repr() const;

  // Identity for factories, value equality otherwise (ints and floats differ).
  bool operator==(const ParamValue& other) const { return value_ == other.value_; }
  bool operator!=(const ParamValue& other) const { return !(*this == other); }

 private:
  Storage value_;
};

// JSON -> ParamValue for scalars (null, bool, integer, float, string).
// Objects and arrays are not scalars; callers resolve those (feature maps).
// Returns false when `json` is not a scalar.
bool ParamValueFromJsonScalar(const nlohmann::json& json, ParamValue* out);

// ParamValue -> JSON (factories become their name).
nlohmann::json ParamValueToJson(const ParamValue& value);

}  // namespace performer
