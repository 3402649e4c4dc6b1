#include "core/io/state_dict.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace performer::io {
namespace {

struct InnerImpl : torch::nn::Module {
  InnerImpl() {
    weight = register_parameter("weight", torch::zeros({2, 3}));
    omega = register_buffer("omega", torch::zeros({3}));
  }
  torch::Tensor weight, omega;
};

struct OuterImpl : torch::nn::Module {
  OuterImpl() {
    inner = register_module("inner", std::make_shared<InnerImpl>());
    bias = register_parameter("bias", torch::zeros({2}));
  }
  std::shared_ptr<InnerImpl> inner;
  torch::Tensor bias;
};

std::map<std::string, torch::Tensor> FullDict() {
  return {{"bias", torch::ones({2})},
          {"inner.weight", torch::full({2, 3}, 2.0)},
          {"inner.omega", torch::full({3}, 3.0)}};
}

TEST(StateDictTest, LoadsParametersAndBuffers) {
  OuterImpl m;
  ASSERT_TRUE(LoadStateDict(m, FullDict()).ok());
  EXPECT_TRUE(torch::equal(m.bias, torch::ones({2})));
  EXPECT_TRUE(torch::equal(m.inner->weight, torch::full({2, 3}, 2.0)));
  EXPECT_TRUE(torch::equal(m.inner->omega, torch::full({3}, 3.0)));
  // Parameters remain trainable leaves.
  EXPECT_TRUE(m.inner->weight.requires_grad());
  EXPECT_TRUE(m.inner->weight.is_leaf());
  EXPECT_EQ(StateDict(m).size(), 3u);
}

TEST(StateDictTest, ConvertsDtype) {
  OuterImpl m;
  auto dict = FullDict();
  dict["bias"] = torch::ones({2}, torch::kFloat64);
  ASSERT_TRUE(LoadStateDict(m, dict).ok());
  EXPECT_EQ(m.bias.scalar_type(), torch::kFloat32);
}

TEST(StateDictTest, StrictReportsMissingAndUnexpected) {
  OuterImpl m;
  auto dict = FullDict();
  dict.erase("inner.omega");
  dict["extra"] = torch::zeros({1});
  absl::Status s = LoadStateDict(m, dict, /*strict=*/true);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Missing key(s) in state_dict: \"inner.omega\""), std::string::npos)
      << s;
  EXPECT_NE(s.message().find("Unexpected key(s) in state_dict: \"extra\""), std::string::npos) << s;
  // Nothing was copied.
  EXPECT_TRUE(torch::equal(m.bias, torch::zeros({2})));
}

TEST(StateDictTest, NonStrictIgnoresNamesButNotShapes) {
  OuterImpl m;
  ASSERT_TRUE(LoadStateDict(m, {{"bias", torch::ones({2})}, {"x", torch::ones({1})}},
                            /*strict=*/false)
                  .ok());
  EXPECT_TRUE(torch::equal(m.bias, torch::ones({2})));
  absl::Status s = LoadStateDict(m, {{"inner.weight", torch::ones({3, 2})}}, /*strict=*/false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("size mismatch for inner.weight: copying a param with shape [3, 2] "
                             "from checkpoint, the shape in current model is [2, 3]."),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace performer::io
