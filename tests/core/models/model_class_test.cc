#include "core/models/model_class.h"

#include <gtest/gtest.h>

#include <string>

namespace performer::models {
namespace {

TEST(ModelClassTest, NamesRoundTrip) {
  for (ModelClass c : {ModelClass::kPerformerLM, ModelClass::kPerformerEncDec,
                       ModelClass::kFastTransformersLM, ModelClass::kFastAttention}) {
    const std::string_view name = ModelClassName(c);
    EXPECT_NE(std::string(ModelClassNames()).find(name), std::string::npos) << name;
    ASSERT_TRUE(ParseModelClass(name).has_value()) << name;
    EXPECT_EQ(*ParseModelClass(name), c) << name;
  }
  EXPECT_STREQ(ModelClassName(ModelClass::kPerformerEncDec), "PerformerEncDec");
}

TEST(ModelClassTest, OtherNamesAreNotClasses) {
  for (const char* name : {"", "GPT", "performerlm", "PerformerLM ", "FastAttention\n"}) {
    EXPECT_FALSE(ParseModelClass(name).has_value()) << name;
  }
}

}  // namespace
}  // namespace performer::models
