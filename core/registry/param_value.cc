#include "core/registry/param_value.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace performer {
namespace {

std::string PythonFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // Shortest round-trip form, with a trailing ".0" for integral values.
  for (int precision = 1; precision <= 17; ++precision) {
    std::string s = absl::StrFormat("%.*g", precision, v);
    if (std::strtod(s.c_str(), nullptr) == v) {
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
  }
  return absl::StrFormat("%.17g", v);
}

std::string PythonStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\') out += '\\';
    out += c;
  }
  out += quote;
  return out;
}

}  // namespace

std::string ParamValue::Repr() const {
  struct Visitor {
    std::string operator()(const None&) const { return "None"; }
    std::string operator()(bool v) const { return v ? "True" : "False"; }
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return PythonFloatRepr(v); }
    std::string operator()(const std::string& v) const { return PythonStringRepr(v); }
    std::string operator()(const std::shared_ptr<NamedFeatureMapFactory>& f) const {
      return absl::StrCat("<factory ", f->name, ">");
    }
  };
  return std::visit(Visitor{}, value_);
}

bool ParamValueFromJsonScalar(const nlohmann::json& json, ParamValue* out) {
  if (json.is_null()) {
    *out = ParamValue();
  } else if (json.is_boolean()) {
    *out = ParamValue(json.get<bool>());
  } else if (json.is_number_integer()) {
    *out = ParamValue(json.get<int64_t>());
  } else if (json.is_number_float()) {
    *out = ParamValue(json.get<double>());
  } else if (json.is_string()) {
    *out = ParamValue(json.get<std::string>());
  } else {
    return false;
  }
  return true;
}

nlohmann::json ParamValueToJson(const ParamValue& value) {
  if (value.is_none()) return nullptr;
  if (value.is_bool()) return value.as_bool();
  if (value.is_int()) return value.as_int();
  if (value.is_float()) return value.as_float();
  if (value.is_string()) return value.as_string();
  return value.as_factory().name;
}

}  // namespace performer
