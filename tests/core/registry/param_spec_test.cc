#include "core/registry/param_spec.h"

#include <gtest/gtest.h>

#include "core/registry/registry.h"

namespace performer {
namespace {

TEST(ParamSpecTest, IntCoercesLikePython) {
  EXPECT_EQ(IntSpec()->Get(ParamValue(3.7))->as_int(), 3);
  EXPECT_EQ(IntSpec()->Get(ParamValue(-3.7))->as_int(), -3);
  EXPECT_EQ(IntSpec()->Get(ParamValue("5"))->as_int(), 5);
  EXPECT_EQ(IntSpec()->Get(ParamValue(" -12 "))->as_int(), -12);
  EXPECT_EQ(IntSpec()->Get(ParamValue(true))->as_int(), 1);
  EXPECT_FALSE(IntSpec()->Get(ParamValue()).ok());
  EXPECT_FALSE(IntSpec()->Get(ParamValue("3.5")).ok());
  EXPECT_FALSE(IntSpec()->Get(ParamValue("abc")).ok());
}

TEST(ParamSpecTest, FloatAndBoolCoercion) {
  EXPECT_EQ(FloatSpec()->Get(ParamValue(1))->as_float(), 1.0);
  EXPECT_EQ(FloatSpec()->Get(ParamValue("0.25"))->as_float(), 0.25);
  EXPECT_FALSE(FloatSpec()->Get(ParamValue("abc")).ok());
  // Python truthiness: the string "False" is true.
  EXPECT_TRUE(BoolSpec()->Get(ParamValue("False"))->as_bool());
  EXPECT_FALSE(BoolSpec()->Get(ParamValue(""))->as_bool());
  EXPECT_FALSE(BoolSpec()->Get(ParamValue(0))->as_bool());
}

TEST(ParamSpecTest, OptionalChoiceAndEquality) {
  ParamSpecPtr topk = OptionalSpec(IntSpec(), ParamValue(32));
  EXPECT_EQ(topk->Get(ParamValue())->as_int(), 32);
  EXPECT_EQ(topk->Get(ParamValue(4.2))->as_int(), 4);
  EXPECT_TRUE(topk->Equals(*OptionalSpec(IntSpec(), ParamValue(32))));
  EXPECT_FALSE(topk->Equals(*OptionalSpec(IntSpec(), ParamValue(16))));
  EXPECT_FALSE(topk->Equals(*IntSpec()));
  ParamSpecPtr choice = ChoiceSpec({ParamValue("relu"), ParamValue("gelu")});
  EXPECT_TRUE(choice->Check(ParamValue("gelu")));
  EXPECT_FALSE(choice->Check(ParamValue("tanh")));
  EXPECT_TRUE(choice->Equals(*ChoiceSpec({ParamValue("relu"), ParamValue("gelu")})));
}

TEST(ParamValueTest, ReprIsPythonLike) {
  EXPECT_EQ(ParamValue().Repr(), "None");
  EXPECT_EQ(ParamValue(true).Repr(), "True");
  EXPECT_EQ(ParamValue(0.1).Repr(), "0.1");
  EXPECT_EQ(ParamValue(1.0).Repr(), "1.0");
  EXPECT_EQ(ParamValue("abc").Repr(), "'abc'");
}

struct Dummy {
  int value = 0;
};

TEST(RegistryTest, RegisterValidateAndCreate) {
  Registry<Dummy> registry;
  auto make = [](const std::vector<std::shared_ptr<Dummy>>&, const ParamMap& p) {
    auto d = std::make_shared<Dummy>();
    d->value = static_cast<int>(p.at("size").as_int());
    return absl::StatusOr<std::shared_ptr<Dummy>>(d);
  };
  ASSERT_TRUE(
      registry.Register("d", "Dummy", {{"size", OptionalSpec(IntSpec(), ParamValue(7))}}, make)
          .ok());
  EXPECT_EQ(registry.Register("d", "Dummy", {}, make).message(), "d is already registered");
  // Same parameter name with another spec is refused.
  EXPECT_FALSE(registry.Register("e", "E", {{"size", IntSpec()}}, make).ok());
  EXPECT_TRUE(registry.Contains("d"));
  EXPECT_EQ(registry.keys(), std::vector<std::string>{"d"});
  EXPECT_EQ(registry.ValidateParameter("size", ParamValue("x")).status().message(),
            "Invalid value 'x' for parameter 'size'");
  EXPECT_EQ((*registry.Create("d", {}, {}))->value, 7);
  EXPECT_EQ((*registry.Create("d", {}, {{"size", ParamValue(3.9)}}))->value, 3);
  EXPECT_EQ(registry.Create("zz", {}, {}).status().message(), "Unknown attention type 'zz'");
}

TEST(RegistryTest, CompositionErrorsAreTypeErrors) {
  Registry<Dummy> registry;
  auto make = [](const std::vector<std::shared_ptr<Dummy>>&, const ParamMap&) {
    return absl::StatusOr<std::shared_ptr<Dummy>>(std::make_shared<Dummy>());
  };
  ASSERT_TRUE(registry
                  .Register("wrap", "Wrapper", {{"limit", OptionalSpec(IntSpec(), ParamValue(1))}},
                            make, {"inner", "limit"}, 1)
                  .ok());
  absl::Status missing = registry.Create("wrap", {}, {}).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(missing.message(),
            "Wrapper.__init__() missing 1 required positional argument: 'inner'");
  auto d = std::make_shared<Dummy>();
  absl::Status twice = registry.Create("wrap", {d, d}, {}).status();
  EXPECT_EQ(twice.message(), "Wrapper.__init__() got multiple values for argument 'limit'");
  EXPECT_TRUE(registry.Create("wrap", {d}, {}).ok());
}

}  // namespace
}  // namespace performer
