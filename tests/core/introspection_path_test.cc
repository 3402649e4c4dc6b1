#include "core/introspection_path.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/introspection.h"

namespace performer {
namespace {

// A module shaped like the reference's attentions: settings as attributes,
// a Dropout child, a buffer, and one setting only reachable by a dotted name.
class ToyAttentionImpl : public torch::nn::Module, public Introspectable {
 public:
  ToyAttentionImpl() {
    dropout = register_module("dropout", torch::nn::Dropout(0.25));
    omega = register_buffer("omega", torch::zeros({3, 2}));
  }
  std::string class_name() const override { return "ToyAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override {
    if (name == "softmax_temp") return ParamValue();
    if (name == "topk") return ParamValue(int64_t{5});
    if (name == "eps") return ParamValue(1e-6);
    if (name == "inner.flag") return ParamValue(true);
    return std::nullopt;
  }
  torch::nn::Dropout dropout{nullptr};
  torch::Tensor omega;
};

class ToyModelImpl : public torch::nn::Module {
 public:
  ToyModelImpl() {
    layers = register_module("layers", torch::nn::ModuleList());
    layers->push_back(torch::nn::Linear(4, 6));
    layers->push_back(std::make_shared<ToyAttentionImpl>());
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({6})));
  }
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};

nlohmann::json Inspect(const torch::nn::Module& m, const std::string& path) {
  absl::StatusOr<nlohmann::json> v = InspectPath(m, path);
  EXPECT_TRUE(v.ok()) << path << ": " << v.status();
  return v.ok() ? *v : nlohmann::json();
}

TEST(InspectPathTest, ClassNamesOfTorchAndOwnModules) {
  ToyModelImpl model;
  EXPECT_EQ(Inspect(model, "__class__"), "ToyModel");
  EXPECT_EQ(Inspect(model, "layers.__class__"), "ModuleList");
  EXPECT_EQ(Inspect(model, "layers.0.__class__"), "Linear");
  EXPECT_EQ(Inspect(model, "layers.1.__class__"), "ToyAttention");
  EXPECT_EQ(Inspect(model, "layers.1.dropout.__class__"), "Dropout");
  EXPECT_EQ(Inspect(model, "norm.__class__"), "LayerNorm");
}

TEST(InspectPathTest, TensorsAndShapes) {
  ToyModelImpl model;
  EXPECT_EQ(Inspect(model, "layers.0.weight.shape"), nlohmann::json::array({6, 4}));
  EXPECT_EQ(Inspect(model, "layers.0.bias.shape"), nlohmann::json::array({6}));
  EXPECT_EQ(Inspect(model, "layers.1.omega.shape"), nlohmann::json::array({3, 2}));
  EXPECT_EQ(Inspect(model, "layers.1.omega.dtype"), "float32");
  EXPECT_EQ(Inspect(model, "norm.weight.ndim"), 1);
  // A tensor path gives the values.
  EXPECT_EQ(Inspect(model, "norm.weight"), nlohmann::json::array({1.0, 1.0, 1.0, 1.0, 1.0, 1.0}));
  EXPECT_EQ(Inspect(model, "layers.1.omega"),
            nlohmann::json::array({{0.0, 0.0}, {0.0, 0.0}, {0.0, 0.0}}));
}

TEST(InspectPathTest, AttributesKeepTheirTypes) {
  ToyModelImpl model;
  const nlohmann::json temp = Inspect(model, "layers.1.softmax_temp");
  EXPECT_TRUE(temp.is_null());
  const nlohmann::json topk = Inspect(model, "layers.1.topk");
  EXPECT_TRUE(topk.is_number_integer());
  EXPECT_EQ(topk, 5);
  EXPECT_EQ(Inspect(model, "layers.1.eps"), 1e-6);
  EXPECT_EQ(Inspect(model, "layers.1.dropout.p"), 0.25);
  EXPECT_EQ(Inspect(model, "layers.1.inner.flag"), true);
  EXPECT_EQ(Inspect(model, "layers.0.in_features"), 4);
  EXPECT_EQ(Inspect(model, "layers.0.out_features"), 6);
  EXPECT_EQ(Inspect(model, "norm.eps"), 1e-5);
  EXPECT_EQ(Inspect(model, "norm.normalized_shape"), nlohmann::json::array({6}));
  EXPECT_EQ(Inspect(model, "training"), true);
  model.eval();
  EXPECT_EQ(Inspect(model, "layers.1.training"), false);
}

TEST(InspectPathTest, UnresolvedPartsAreNamed) {
  ToyModelImpl model;
  absl::StatusOr<nlohmann::json> v = InspectPath(model, "layers.1.nope.shape");
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(v.status().message().find("'ToyAttention' object has no attribute 'nope'"),
            std::string::npos)
      << v.status();
  v = InspectPath(model, "layers.7");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  v = InspectPath(model, "layers.0.weight.shape.x");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  v = InspectPath(model, "layers.0.weight.foo");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
  // A module is not a value.
  v = InspectPath(model, "layers.1");
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace performer
