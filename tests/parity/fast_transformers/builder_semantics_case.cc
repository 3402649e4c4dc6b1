// Runner for kind "builder_semantics": replays every scenario of the case
// generically (builder by class name; from_kwargs with its strict flag; the
// attribute assignments; the reads, dotted ones included; get(); the
// inspected attributes of the built object) and checks the outcome, the
// failing stage, the error category, the message, the read / inspected
// values and the built class.
//
// Stages are named as in the fixture: "from_kwargs", "set:<name>",
// "read:<name>", "get", "inspect:<path>". Python exception types map to
// absl codes: ValueError -> InvalidArgument, AttributeError -> NotFound,
// TypeError -> FailedPrecondition.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/builders/attention_builder.h"
#include "core/builders/transformer_builders.h"
#include "core/introspection_path.h"
#include "tests/parity/case_runner.h"

namespace performer::testing {
namespace {

using Json = nlohmann::ordered_json;

// A builder of any class behind one interface.
class ScenarioBuilder {
 public:
  virtual ~ScenarioBuilder() = default;
  virtual absl::Status Set(const std::string& name, const ParamValue& value) = 0;
  virtual absl::StatusOr<nlohmann::json> Read(const std::string& name) const = 0;
  // `get` is the scenario's get entry: true, or an attention type string.
  virtual absl::StatusOr<std::shared_ptr<torch::nn::Module>> Build(const Json& get) = 0;
};

// "<attention builder>.available_attentions" of a transformer builder.
template <typename A>
std::optional<std::vector<std::string>> AvailableAttentions(const EncoderBuilderBase<A>& builder,
                                                            const std::string& owner) {
  if (owner == "attention") return builder.attention().available_attentions();
  return std::nullopt;
}
template <typename S, typename C>
std::optional<std::vector<std::string>> AvailableAttentions(const DecoderBuilderBase<S, C>& builder,
                                                            const std::string& owner) {
  if (owner == "self_attention") return builder.self_attention().available_attentions();
  if (owner == "cross_attention") return builder.cross_attention().available_attentions();
  return std::nullopt;
}

template <typename Builder>
class TransformerScenarioBuilder final : public ScenarioBuilder {
 public:
  explicit TransformerScenarioBuilder(Builder builder) : builder_(std::move(builder)) {}
  absl::Status Set(const std::string& name, const ParamValue& value) override {
    return builder_.Set(name, value);
  }
  absl::StatusOr<nlohmann::json> Read(const std::string& name) const override {
    const std::string suffix = ".available_attentions";
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      if (auto names = AvailableAttentions(builder_, name.substr(0, name.size() - suffix.size()))) {
        return nlohmann::json(*names);
      }
    }
    absl::StatusOr<ParamValue> v = builder_.Get(name);
    if (!v.ok()) return v.status();
    return ParamValueToJson(*v);
  }
  absl::StatusOr<std::shared_ptr<torch::nn::Module>> Build(const Json& get) override {
    if (!get.is_boolean()) {
      return absl::InvalidArgumentError("transformer builders take get: true, got " + get.dump());
    }
    auto model = builder_.Build();
    if (!model.ok()) return model.status();
    return std::static_pointer_cast<torch::nn::Module>(*model);
  }

 private:
  Builder builder_;
};

template <typename Builder>
class AttentionScenarioBuilder final : public ScenarioBuilder {
 public:
  explicit AttentionScenarioBuilder(Builder builder) : builder_(std::move(builder)) {}
  absl::Status Set(const std::string& name, const ParamValue& value) override {
    return builder_.Set(name, value);
  }
  absl::StatusOr<nlohmann::json> Read(const std::string& name) const override {
    if (name == "available_attentions") return nlohmann::json(builder_.available_attentions());
    absl::StatusOr<ParamValue> v = builder_.Get(name);
    if (!v.ok()) return v.status();
    return ParamValueToJson(*v);
  }
  absl::StatusOr<std::shared_ptr<torch::nn::Module>> Build(const Json& get) override {
    if (!get.is_string()) {
      return absl::InvalidArgumentError("attention builders take an attention type, got " +
                                        get.dump());
    }
    auto module = builder_.Build(get.get<std::string>());
    if (!module.ok()) return module.status();
    return std::static_pointer_cast<torch::nn::Module>(*module);
  }

 private:
  Builder builder_;
};

template <template <typename> class Wrapper, typename Builder>
absl::StatusOr<std::unique_ptr<ScenarioBuilder>> Wrap(absl::StatusOr<Builder> builder) {
  if (!builder.ok()) return builder.status();
  return std::unique_ptr<ScenarioBuilder>(new Wrapper<Builder>(*std::move(builder)));
}

absl::StatusOr<std::unique_ptr<ScenarioBuilder>> MakeBuilder(const std::string& cls,
                                                             const ParamItems& items, bool strict) {
  if (cls == "TransformerEncoderBuilder") {
    return Wrap<TransformerScenarioBuilder>(
        TransformerEncoderBuilder::FromDictionary(items, strict));
  }
  if (cls == "TransformerDecoderBuilder") {
    return Wrap<TransformerScenarioBuilder>(
        TransformerDecoderBuilder::FromDictionary(items, strict));
  }
  if (cls == "RecurrentEncoderBuilder") {
    return Wrap<TransformerScenarioBuilder>(RecurrentEncoderBuilder::FromDictionary(items, strict));
  }
  if (cls == "RecurrentDecoderBuilder") {
    return Wrap<TransformerScenarioBuilder>(RecurrentDecoderBuilder::FromDictionary(items, strict));
  }
  if (cls == "AttentionBuilder") {
    return Wrap<AttentionScenarioBuilder>(AttentionBuilder::FromDictionary(items, strict));
  }
  if (cls == "RecurrentAttentionBuilder") {
    return Wrap<AttentionScenarioBuilder>(RecurrentAttentionBuilder::FromDictionary(items, strict));
  }
  if (cls == "RecurrentCrossAttentionBuilder") {
    return Wrap<AttentionScenarioBuilder>(
        RecurrentCrossAttentionBuilder::FromDictionary(items, strict));
  }
  return absl::UnimplementedError("unknown builder class " + cls);
}

std::string PythonErrorType(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return "ValueError";
    case absl::StatusCode::kNotFound:
      return "AttributeError";
    case absl::StatusCode::kFailedPrecondition:
      return "TypeError";
    default:
      return absl::StrCat("<", absl::StatusCodeToString(code), ">");
  }
}

// JSON equality that keeps Python's int / float / bool distinction (3 vs
// 3.0 vs true) and compares floats exactly.
bool SameValue(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() != b.is_number_float()) return false;
    if (a.is_number_float()) return a.get<double>() == b.get<double>();
    return a.get<int64_t>() == b.get<int64_t>();
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!SameValue(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

struct Outcome {
  std::string stage;  // Empty when everything succeeded.
  absl::Status error;
  bool has_read = false;
  nlohmann::json read = nlohmann::json::object();
  std::optional<std::string> built_class;
  nlohmann::json inspect = nlohmann::json::object();
};

Outcome RunScenario(const Json& scenario) {
  Outcome out;
  auto fail = [&](std::string stage, absl::Status status) {
    out.stage = std::move(stage);
    out.error = std::move(status);
    return out;
  };
  bool strict = true;
  absl::StatusOr<ParamItems> items =
      ParamItemsFromJson(scenario.contains("kwargs") ? scenario.at("kwargs") : Json(), &strict);
  if (!items.ok()) return fail("from_kwargs", items.status());
  absl::StatusOr<std::unique_ptr<ScenarioBuilder>> builder =
      MakeBuilder(scenario.at("builder").get<std::string>(), *items, strict);
  if (!builder.ok()) return fail("from_kwargs", builder.status());

  if (scenario.contains("set")) {
    for (const Json& assignment : scenario.at("set")) {
      const std::string name = assignment.at(0).get<std::string>();
      Json one = Json::object();
      one[name] = assignment.at(1);
      absl::StatusOr<ParamItems> value = ParamItemsFromJson(one);
      if (!value.ok()) return fail("set:" + name, value.status());
      absl::Status status = (*builder)->Set(name, value->at(0).second);
      if (!status.ok()) return fail("set:" + name, status);
    }
  }

  out.has_read = true;
  if (scenario.contains("read")) {
    for (const Json& name_json : scenario.at("read")) {
      const std::string name = name_json.get<std::string>();
      absl::StatusOr<nlohmann::json> value = (*builder)->Read(name);
      if (!value.ok()) return fail("read:" + name, value.status());
      out.read[name] = *value;
    }
  }

  const Json get = scenario.contains("get") ? scenario.at("get") : Json(false);
  if (get.is_boolean() && !get.get<bool>()) return out;
  absl::StatusOr<std::shared_ptr<torch::nn::Module>> built = (*builder)->Build(get);
  if (!built.ok()) return fail("get", built.status());
  out.built_class = PythonClassName(**built);
  if (scenario.contains("inspect")) {
    for (const Json& path_json : scenario.at("inspect")) {
      const std::string path = path_json.get<std::string>();
      absl::StatusOr<nlohmann::json> value = InspectPath(**built, path);
      if (!value.ok()) return fail("inspect:" + path, value.status());
      out.inspect[path] = *value;
    }
  }
  return out;
}

void CheckValues(const char* what, const Json& expected, const nlohmann::json& actual) {
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    const nlohmann::json want = nlohmann::json::parse(it.value().dump());
    ASSERT_TRUE(actual.contains(it.key())) << what << " '" << it.key() << "' was not produced";
    EXPECT_TRUE(SameValue(actual.at(it.key()), want))
        << what << " '" << it.key() << "': got " << actual.at(it.key()).dump() << ", expected "
        << want.dump();
  }
  EXPECT_EQ(actual.size(), expected.size()) << what << " values: got " << actual.dump();
}

void RunBuilderSemanticsCase(const FixtureCase& c) {
  // Re-read case.json keeping key order: the order of the keyword arguments
  // decides which error Python reports first.
  std::ifstream in(c.dir + "/case.json");
  ASSERT_TRUE(in.good()) << c.dir;
  const Json spec = Json::parse(in);
  const Json& scenarios = spec.at("scenarios");
  ASSERT_FALSE(scenarios.empty());
  for (const Json& entry : scenarios) {
    const Json& scenario = entry.at("scenario");
    const Json& observed = entry.at("observed");
    SCOPED_TRACE(scenario.value("id", scenario.dump()));
    const Outcome out = RunScenario(scenario);
    const std::string outcome = observed.at("outcome").get<std::string>();
    if (outcome == "ok") {
      EXPECT_TRUE(out.stage.empty()) << "failed at " << out.stage << ": " << out.error;
      if (!out.stage.empty()) continue;
    } else {
      ASSERT_EQ(outcome, "error");
      EXPECT_EQ(out.stage, observed.at("stage").get<std::string>())
          << (out.stage.empty() ? "succeeded" : out.error.ToString());
      if (out.stage.empty()) continue;
      EXPECT_EQ(PythonErrorType(out.error.code()), observed.at("error_type").get<std::string>())
          << out.error;
      // An empty Python message (e.g. the bare AttributeError() of an unset
      // attention parameter) says nothing to compare.
      const std::string message = observed.value("message", "");
      if (!message.empty()) {
        EXPECT_EQ(std::string(out.error.message()), message);
      }
    }
    if (observed.contains("read")) {
      EXPECT_TRUE(out.has_read) << "reads were not reached";
      CheckValues("read", observed.at("read"), out.read);
    }
    if (observed.contains("built_class")) {
      ASSERT_TRUE(out.built_class.has_value()) << "nothing was built";
      EXPECT_EQ(*out.built_class, observed.at("built_class").get<std::string>());
    }
    if (observed.contains("inspect")) CheckValues("inspect", observed.at("inspect"), out.inspect);
  }
}

PERFORMER_REGISTER_CASE_RUNNER("fast_transformers", "builder_semantics", RunBuilderSemanticsCase);

}  // namespace
}  // namespace performer::testing
