#include "core/registry/param_spec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <typeinfo>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer {
namespace {

absl::Status CannotConvert(const ParamValue& v, const char* type) {
  return absl::InvalidArgumentError(absl::StrCat("cannot convert ", v.Repr(), " to ", type));
}

// Python's int() of a string: optional sign, digits (underscores allowed
// between digits), surrounding whitespace.
bool ParsePythonInt(const std::string& text, int64_t* out) {
  std::string s(absl::StripAsciiWhitespace(text));
  std::string digits;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) digits += s[i++];
  if (i >= s.size()) return false;
  bool previous_digit = false;
  for (; i < s.size(); ++i) {
    if (absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) {
      digits += s[i];
      previous_digit = true;
    } else if (s[i] == '_' && previous_digit && i + 1 < s.size() &&
               absl::ascii_isdigit(static_cast<unsigned char>(s[i + 1]))) {
      previous_digit = false;
    } else {
      return false;
    }
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool ParsePythonFloat(const std::string& text, double* out) {
  std::string s(absl::StripAsciiWhitespace(text));
  if (s.empty()) return false;
  std::string lower = absl::AsciiStrToLower(s);
  std::string body = lower;
  double sign = 1.0;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1.0 : 1.0;
    body = body.substr(1);
  }
  if (body == "inf" || body == "infinity") {
    *out = sign * HUGE_VAL;
    return true;
  }
  if (body == "nan") {
    *out = std::nan("");
    return true;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

class IntSpecImpl final : public ParamSpec {
 public:
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override {
    if (v.is_int()) return v;
    if (v.is_bool()) return ParamValue(int64_t{v.as_bool() ? 1 : 0});
    if (v.is_float()) {
      double d = v.as_float();
      if (!std::isfinite(d)) return CannotConvert(v, "int");
      return ParamValue(static_cast<int64_t>(std::trunc(d)));
    }
    if (v.is_string()) {
      int64_t parsed = 0;
      if (ParsePythonInt(v.as_string(), &parsed)) return ParamValue(parsed);
    }
    return CannotConvert(v, "int");
  }
  bool Equals(const ParamSpec& o) const override { return typeid(o) == typeid(*this); }
  std::string Describe() const override { return "Int"; }
};

class FloatSpecImpl final : public ParamSpec {
 public:
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override {
    if (v.is_float()) return v;
    if (v.is_int()) return ParamValue(static_cast<double>(v.as_int()));
    if (v.is_bool()) return ParamValue(v.as_bool() ? 1.0 : 0.0);
    if (v.is_string()) {
      double parsed = 0;
      if (ParsePythonFloat(v.as_string(), &parsed)) return ParamValue(parsed);
    }
    return CannotConvert(v, "float");
  }
  bool Equals(const ParamSpec& o) const override { return typeid(o) == typeid(*this); }
  std::string Describe() const override { return "Float"; }
};

class BoolSpecImpl final : public ParamSpec {
 public:
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override {
    if (v.is_bool()) return v;
    if (v.is_none()) return ParamValue(false);
    if (v.is_int()) return ParamValue(v.as_int() != 0);
    if (v.is_float()) return ParamValue(v.as_float() != 0.0);
    if (v.is_string()) return ParamValue(!v.as_string().empty());
    return ParamValue(true);  // Objects are truthy.
  }
  bool Equals(const ParamSpec& o) const override { return typeid(o) == typeid(*this); }
  std::string Describe() const override { return "Bool"; }
};

class CallableSpecImpl final : public ParamSpec {
 public:
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override {
    if (v.is_factory()) return v;
    return absl::InvalidArgumentError(absl::StrCat(v.Repr(), " is not callable"));
  }
  bool Equals(const ParamSpec& o) const override { return typeid(o) == typeid(*this); }
  std::string Describe() const override { return "Callable"; }
};

class EventDispatcherSpecImpl final : public ParamSpec {
 public:
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override {
    if (v.is_string()) return v;
    return absl::InvalidArgumentError(absl::StrCat(v.Repr(), " is not an event dispatcher"));
  }
  bool Equals(const ParamSpec& o) const override { return typeid(o) == typeid(*this); }
  std::string Describe() const override { return "EventDispatcherInstance"; }
};

class OptionalSpecImpl final : public ParamSpec {
 public:
  OptionalSpecImpl(ParamSpecPtr inner, ParamValue default_value)
      : inner_(std::move(inner)), default_(std::move(default_value)) {}
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override {
    if (v.is_none()) return default_;
    return inner_->Get(v);
  }
  bool Equals(const ParamSpec& o) const override {
    const auto* other = dynamic_cast<const OptionalSpecImpl*>(&o);
    return other != nullptr && inner_->Equals(*other->inner_) && default_ == other->default_;
  }
  std::string Describe() const override {
    return absl::StrCat("Optional[", inner_->Describe(), ", ", default_.Repr(), "]");
  }

 private:
  ParamSpecPtr inner_;
  ParamValue default_;
};

class ChoiceSpecImpl final : public ParamSpec {
 public:
  explicit ChoiceSpecImpl(std::vector<ParamValue> choices) : choices_(std::move(choices)) {}
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override {
    for (const ParamValue& c : choices_) {
      if (c == v) return v;
    }
    return absl::InvalidArgumentError(absl::StrCat(v.Repr(), " is not in ", Describe()));
  }
  bool Equals(const ParamSpec& o) const override {
    const auto* other = dynamic_cast<const ChoiceSpecImpl*>(&o);
    return other != nullptr && choices_ == other->choices_;
  }
  std::string Describe() const override {
    return absl::StrCat(
        "Choice[",
        absl::StrJoin(choices_, ", ",
                      [](std::string* out, const ParamValue& c) { out->append(c.Repr()); }),
        "]");
  }

 private:
  std::vector<ParamValue> choices_;
};

class CustomSpecImpl final : public ParamSpec {
 public:
  CustomSpecImpl(std::string name,
                 std::function<absl::StatusOr<ParamValue>(const ParamValue&)> predicate)
      : name_(std::move(name)), predicate_(std::move(predicate)) {}
  absl::StatusOr<ParamValue> Get(const ParamValue& v) const override { return predicate_(v); }
  bool Equals(const ParamSpec& o) const override { return &o == this; }
  std::string Describe() const override { return name_; }

 private:
  std::string name_;
  std::function<absl::StatusOr<ParamValue>(const ParamValue&)> predicate_;
};

}  // namespace

ParamSpecPtr IntSpec() {
  static const auto* const spec = new std::shared_ptr<const ParamSpec>(new IntSpecImpl());
  return *spec;
}
ParamSpecPtr FloatSpec() {
  static const auto* const spec = new std::shared_ptr<const ParamSpec>(new FloatSpecImpl());
  return *spec;
}
ParamSpecPtr BoolSpec() {
  static const auto* const spec = new std::shared_ptr<const ParamSpec>(new BoolSpecImpl());
  return *spec;
}
ParamSpecPtr CallableSpec() {
  static const auto* const spec = new std::shared_ptr<const ParamSpec>(new CallableSpecImpl());
  return *spec;
}
ParamSpecPtr EventDispatcherInstanceSpec() {
  static const auto* const spec =
      new std::shared_ptr<const ParamSpec>(new EventDispatcherSpecImpl());
  return *spec;
}
ParamSpecPtr OptionalSpec(ParamSpecPtr inner, ParamValue default_value) {
  return std::make_shared<OptionalSpecImpl>(std::move(inner), std::move(default_value));
}
ParamSpecPtr ChoiceSpec(std::vector<ParamValue> choices) {
  return std::make_shared<ChoiceSpecImpl>(std::move(choices));
}
ParamSpecPtr CustomSpec(std::string name,
                        std::function<absl::StatusOr<ParamValue>(const ParamValue&)> predicate) {
  return std::make_shared<CustomSpecImpl>(std::move(name), std::move(predicate));
}

}  // namespace performer
