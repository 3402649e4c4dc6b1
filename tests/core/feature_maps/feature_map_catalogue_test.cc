// The feature-map catalogue (named factories from JSON) and the
// deterministic activation feature maps.
#include "core/feature_maps/feature_map_catalogue.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/feature_maps/activation_feature_map.h"
#include "core/feature_maps/feature_map.h"

namespace performer {
namespace {

using nlohmann::json;

TEST(EluFeatureMap, IsEluPlusOneWithNothingToSample) {
  NamedFeatureMapFactory factory = EluFeatureMapFactory();
  EXPECT_EQ(factory.name, "elu_feature_map");
  FeatureMapPtr fm = factory.make(6);
  EXPECT_EQ(fm->class_name(), "ActivationFunctionFeatureMap");
  EXPECT_EQ(fm->query_dims(), 6);
  EXPECT_EQ(fm->output_dims(), 6);
  EXPECT_TRUE(fm->named_buffers().is_empty());
  EXPECT_TRUE(fm->parameters().empty());
  ASSERT_TRUE(fm->attribute("activation_function").has_value());
  EXPECT_EQ(fm->attribute("activation_function")->as_string(), "elu_plus_one");
  fm->new_feature_map(torch::kCPU);

  const torch::Tensor x = torch::tensor({-2.0f, -0.5f, 0.0f, 0.5f, 3.0f});
  const torch::Tensor expected =
      torch::tensor({std::exp(-2.0f), std::exp(-0.5f), 1.0f, 1.5f, 4.0f});
  EXPECT_TRUE(torch::allclose(fm->forward_queries(x), expected));
  EXPECT_TRUE(torch::allclose(fm->forward_keys(x), expected));
  // Strictly positive, as linear attention needs.
  EXPECT_GT(fm->forward(torch::full({3}, -10.0)).min().item<double>(), 0.0);

  torch::Tensor grad_x = torch::tensor({-1.0, 2.0}, torch::kDouble).requires_grad_(true);
  fm->forward(grad_x).sum().backward();
  EXPECT_TRUE(torch::allclose(grad_x.grad(), torch::tensor({std::exp(-1.0), 1.0}, torch::kDouble)));
}

TEST(ActivationFunctionFeatureMap, NamedFunctions) {
  const std::vector<std::string> names = ActivationNames();
  for (const char* expected : {"relu", "exp", "elu", "elu_plus_one", "identity", "softplus"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  const torch::Tensor x = torch::tensor({-1.0f, 0.5f});
  EXPECT_TRUE(torch::equal(ActivationByName("relu")->fn(x), torch::tensor({0.0f, 0.5f})));
  EXPECT_TRUE(torch::equal(ActivationByName("identity")->fn(x), x));
  EXPECT_TRUE(torch::allclose(ActivationByName("exp")->fn(x), x.exp()));
  EXPECT_TRUE(torch::allclose(ActivationByName("elu")->fn(x), torch::elu(x)));

  absl::StatusOr<NamedActivation> unknown = ActivationByName("gelu_approx");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("gelu_approx"), std::string::npos);

  absl::StatusOr<NamedFeatureMapFactory> relu =
      MakeFeatureMapFactory("ActivationFunctionFeatureMap", {{"activation_function", "relu"}});
  ASSERT_TRUE(relu.ok()) << relu.status();
  EXPECT_EQ(relu->name, "ActivationFunctionFeatureMap");
  FeatureMapPtr fm = relu->make(4);
  EXPECT_EQ(fm->attribute("activation_function")->as_string(), "relu");
  EXPECT_TRUE(torch::equal(fm->forward(x), torch::tensor({0.0f, 0.5f})));
  EXPECT_FALSE(MakeFeatureMapFactory("ActivationFunctionFeatureMap", json::object()).ok());
}

FeatureMapPtr Build(const std::string& class_name, const json& kwargs, int64_t query_dims) {
  absl::StatusOr<NamedFeatureMapFactory> factory = MakeFeatureMapFactory(class_name, kwargs);
  EXPECT_TRUE(factory.ok()) << factory.status();
  if (!factory.ok()) return nullptr;
  EXPECT_EQ(factory->name, class_name);
  FeatureMapPtr fm = factory->make(query_dims);
  EXPECT_EQ(fm->class_name(), class_name);
  return fm;
}

TEST(FeatureMapCatalogue, RandomFourierFeaturesDefaultsAndKwargs) {
  FeatureMapPtr fm = Build("RandomFourierFeatures", nullptr, 16);
  ASSERT_NE(fm, nullptr);
  EXPECT_EQ(fm->attribute("n_dims")->as_int(), 16);
  EXPECT_DOUBLE_EQ(fm->attribute("softmax_temp")->as_float(), 0.25);
  EXPECT_FALSE(fm->attribute("orthogonal")->as_bool());
  EXPECT_EQ(fm->attribute("redraw")->as_int(), 1);
  EXPECT_FALSE(fm->attribute("deterministic_eval")->as_bool());
  EXPECT_FALSE(fm->attribute("stabilize").has_value());
  EXPECT_EQ(fm->output_dims(), 16);

  fm = Build("RandomFourierFeatures",
             {{"n_dims", 20},
              {"softmax_temp", 0.5},
              {"orthogonal", true},
              {"redraw", 4},
              {"deterministic_eval", true}},
             8);
  ASSERT_NE(fm, nullptr);
  EXPECT_EQ(fm->attribute("n_dims")->as_int(), 20);
  EXPECT_EQ(fm->attribute("softmax_temp")->as_float(), 0.5);
  EXPECT_TRUE(fm->attribute("orthogonal")->as_bool());
  EXPECT_EQ(fm->attribute("redraw")->as_int(), 4);
  EXPECT_TRUE(fm->attribute("deterministic_eval")->as_bool());
  EXPECT_EQ(fm->named_buffers()["omega"].sizes(), (std::vector<int64_t>{8, 10}));
  // An integer temperature is a number too.
  fm = Build("RandomFourierFeatures", {{"softmax_temp", 2}}, 8);
  ASSERT_NE(fm, nullptr);
  EXPECT_EQ(fm->attribute("softmax_temp")->as_float(), 2.0);
}

TEST(FeatureMapCatalogue, SmoothedFavorAndGeneralized) {
  FeatureMapPtr smoothed =
      Build("SmoothedRandomFourierFeatures", {{"n_dims", 17}, {"smoothing", 0.5}}, 8);
  ASSERT_NE(smoothed, nullptr);
  EXPECT_EQ(smoothed->attribute("n_dims")->as_int(), 16);
  EXPECT_EQ(smoothed->attribute("smoothing")->as_float(), 0.5);
  EXPECT_EQ(smoothed->output_dims(), 17);

  FeatureMapPtr favor = Build("Favor", {{"n_dims", 24}, {"stabilize", true}}, 8);
  ASSERT_NE(favor, nullptr);
  EXPECT_TRUE(favor->attribute("stabilize")->as_bool());
  EXPECT_TRUE(favor->attribute("orthogonal")->as_bool());
  EXPECT_EQ(favor->output_dims(), 24);
  EXPECT_FALSE(Build("Favor", json::object(), 8)->attribute("stabilize")->as_bool());

  FeatureMapPtr grf = Build("GeneralizedRandomFeatures", {{"n_dims", 12}}, 8);
  ASSERT_NE(grf, nullptr);
  EXPECT_EQ(grf->attribute("kernel_fn")->as_string(), "relu");
  EXPECT_EQ(grf->attribute("softmax_temp")->as_float(), 1.0);
  EXPECT_EQ(grf->attribute("n_dims")->as_int(), 24);
  EXPECT_EQ(grf->output_dims(), 12);
  grf = Build("GeneralizedRandomFeatures", {{"kernel_fn", "exp"}, {"softmax_temp", nullptr}}, 4);
  ASSERT_NE(grf, nullptr);
  EXPECT_EQ(grf->attribute("kernel_fn")->as_string(), "exp");
  EXPECT_DOUBLE_EQ(grf->attribute("softmax_temp")->as_float(), 0.5);
}

TEST(FeatureMapCatalogue, FactoriesBuildIndependentMaps) {
  absl::StatusOr<NamedFeatureMapFactory> factory = MakeFeatureMapFactory("Favor", {{"n_dims", 16}});
  ASSERT_TRUE(factory.ok()) << factory.status();
  FeatureMapPtr a = factory->make(8);
  FeatureMapPtr b = factory->make(4);
  EXPECT_NE(a, b);
  EXPECT_EQ(a->query_dims(), 8);
  EXPECT_EQ(b->query_dims(), 4);
  EXPECT_EQ(b->named_buffers()["omega"].sizes(), (std::vector<int64_t>{4, 8}));
}

void ExpectInvalid(const absl::StatusOr<NamedFeatureMapFactory>& result,
                   const std::vector<std::string>& mentions) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& m : mentions) {
    EXPECT_NE(result.status().message().find(m), std::string::npos)
        << "'" << result.status().message() << "' does not mention '" << m << "'";
  }
}

TEST(FeatureMapCatalogue, ErrorsNameTheProblem) {
  ExpectInvalid(MakeFeatureMapFactory("Favour", json::object()), {"Favour", "Favor"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", {{"n_features", 16}}), {"Favor", "n_features"});
  ExpectInvalid(MakeFeatureMapFactory("elu_feature_map", {{"n_dims", 16}}),
                {"elu_feature_map", "n_dims"});
  ExpectInvalid(MakeFeatureMapFactory("RandomFourierFeatures", {{"stabilize", true}}),
                {"stabilize"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", {{"n_dims", "16"}}), {"n_dims", "integer"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", {{"n_dims", 16.5}}), {"n_dims"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", {{"n_dims", -4}}), {"n_dims"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", {{"orthogonal", 1}}), {"orthogonal", "boolean"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", {{"redraw", 0}}), {"redraw"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", {{"softmax_temp", "0.5"}}), {"softmax_temp"});
  ExpectInvalid(MakeFeatureMapFactory("SmoothedRandomFourierFeatures", {{"smoothing", nullptr}}),
                {"smoothing"});
  ExpectInvalid(MakeFeatureMapFactory("SmoothedRandomFourierFeatures", {{"n_dims", 0}}),
                {"n_dims"});
  ExpectInvalid(MakeFeatureMapFactory("GeneralizedRandomFeatures", {{"kernel_fn", "swish"}}),
                {"kernel_fn", "swish"});
  ExpectInvalid(MakeFeatureMapFactory("GeneralizedRandomFeatures", {{"kernel_fn", nullptr}}),
                {"kernel_fn"});
  ExpectInvalid(MakeFeatureMapFactory("Favor", json::array({16})), {"kwargs"});
}

TEST(FeatureMapCatalogue, FromJson) {
  absl::StatusOr<NamedFeatureMapFactory> favor =
      FeatureMapFactoryFromJson({{"factory", "Favor"}, {"kwargs", {{"n_dims", 32}}}});
  ASSERT_TRUE(favor.ok()) << favor.status();
  EXPECT_EQ(favor->name, "Favor");
  EXPECT_EQ(favor->make(8)->output_dims(), 32);

  absl::StatusOr<NamedFeatureMapFactory> elu =
      FeatureMapFactoryFromJson({{"factory", "elu_feature_map"}});
  ASSERT_TRUE(elu.ok()) << elu.status();
  EXPECT_EQ(elu->make(8)->class_name(), "ActivationFunctionFeatureMap");
  ASSERT_TRUE(FeatureMapFactoryFromJson({{"factory", "Favor"}, {"kwargs", nullptr}}).ok());

  ExpectInvalid(FeatureMapFactoryFromJson("Favor"), {"factory"});
  ExpectInvalid(FeatureMapFactoryFromJson({{"kwargs", json::object()}}), {"factory"});
  ExpectInvalid(FeatureMapFactoryFromJson({{"factory", 3}}), {"factory"});
  ExpectInvalid(FeatureMapFactoryFromJson({{"factory", "Favor"}, {"args", json::array()}}),
                {"args"});
  ExpectInvalid(FeatureMapFactoryFromJson({{"factory", "Nope"}}), {"Nope"});
  ExpectInvalid(FeatureMapFactoryFromJson({{"factory", "Favor"}, {"kwargs", {{"x", 1}}}}), {"'x'"});
}

// A factory result is usable as a ParamValue (how builders pass it around).
TEST(FeatureMapCatalogue, FactoriesAreParamValues) {
  ParamValue value(EluFeatureMapFactory());
  ASSERT_TRUE(value.is_factory());
  EXPECT_EQ(value.Repr(), "<factory elu_feature_map>");
  EXPECT_EQ(value.as_factory().make(3)->output_dims(), 3);
}

}  // namespace
}  // namespace performer
