// AttentionLayer: state-dict names and shapes, defaults, the head-major
// split and the shapes the inner attention receives.
#include "core/attention/attention_layer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tests/core/recurrent/reference_attentions.h"
#include "tests/testing/fixtures.h"

namespace performer {
namespace {

using testing::ReferenceFullAttention;

// Records the tensors it is called with and returns the values' first L rows.
class RecordingAttention : public AttentionImpl {
 public:
  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask&, const Mask&,
                        const Mask&) override {
    seen_queries = queries;
    seen_keys = keys;
    seen_values = values;
    return values.narrow(1, 0, queries.size(1));
  }
  std::string class_name() const override { return "RecordingAttention"; }
  torch::Tensor seen_queries, seen_keys, seen_values;
};

constexpr int64_t kN = 2, kL = 4, kS = 5, kModel = 32, kHeads = 4, kKeys = 6, kValues = 5,
                  kModelKeys = 24;

TEST(AttentionLayerTest, StateDictNamesAndShapes) {
  AttentionLayerImpl layer(std::make_shared<ReferenceFullAttention>(), kModel, kHeads, kKeys,
                           kValues, kModelKeys);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const auto& p : layer.named_parameters()) {
    names.push_back(p.key());
    shapes.push_back(p.value().sizes().vec());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"query_projection.weight", "query_projection.bias",
                                             "key_projection.weight", "key_projection.bias",
                                             "value_projection.weight", "value_projection.bias",
                                             "out_projection.weight", "out_projection.bias"}));
  EXPECT_EQ(shapes, (std::vector<std::vector<int64_t>>{
                        {24, 32}, {24}, {24, 24}, {24}, {20, 24}, {20}, {32, 20}, {32}}));
  EXPECT_EQ(layer.class_name(), "AttentionLayer");
  EXPECT_EQ(layer.attribute("n_heads")->as_int(), kHeads);
  EXPECT_EQ(layer.attribute("d_model_keys")->as_int(), kModelKeys);
  // The inner attention is a submodule named "inner_attention".
  EXPECT_EQ(layer.named_children().keys().front(), "inner_attention");
}

TEST(AttentionLayerTest, DefaultsSplitTheModelWidthOverTheHeads) {
  AttentionLayerImpl layer(std::make_shared<ReferenceFullAttention>(), kModel, kHeads);
  EXPECT_EQ(layer.d_keys(), kModel / kHeads);
  EXPECT_EQ(layer.d_values(), kModel / kHeads);
  EXPECT_EQ(layer.key_projection->weight.sizes(), (std::vector<int64_t>{kModel, kModel}));
}

TEST(AttentionLayerTest, SplitsHeadsHeadMajor) {
  torch::manual_seed(1);
  auto inner = std::make_shared<RecordingAttention>();
  AttentionLayerImpl layer(inner, kModel, kHeads, kKeys, kKeys, kModelKeys);
  torch::Tensor queries = torch::randn({kN, kL, kModel});
  torch::Tensor keys = torch::randn({kN, kS, kModelKeys});
  torch::Tensor values = torch::randn({kN, kS, kModelKeys});
  torch::Tensor out = layer.forward(queries, keys, values, Mask::Full(kL, kS), Mask::Full(kN, kL),
                                    Mask::Full(kN, kS));
  ASSERT_EQ(inner->seen_queries.sizes(), (std::vector<int64_t>{kN, kL, kHeads, kKeys}));
  ASSERT_EQ(inner->seen_keys.sizes(), (std::vector<int64_t>{kN, kS, kHeads, kKeys}));
  ASSERT_EQ(inner->seen_values.sizes(), (std::vector<int64_t>{kN, kS, kHeads, kKeys}));
  torch::Tensor projected = layer.query_projection->forward(queries);
  for (int64_t h = 0; h < kHeads; ++h) {
    // Head h holds projected features h*d_keys .. (h+1)*d_keys - 1.
    EXPECT_TRUE(
        torch::equal(inner->seen_queries.select(2, h), projected.narrow(-1, h * kKeys, kKeys)));
  }
  torch::Tensor expected =
      layer.out_projection->forward(layer.value_projection->forward(values).narrow(1, 0, kL));
  EXPECT_TENSOR_CLOSE(out, expected, 1e-6, 1e-6);
}

TEST(AttentionLayerTest, MatchesPerHeadAttentionAndIsDifferentiable) {
  torch::manual_seed(2);
  AttentionLayerImpl layer(std::make_shared<ReferenceFullAttention>(), kModel, kHeads, kKeys,
                           kValues, kModelKeys);
  torch::Tensor queries = torch::randn({kN, kL, kModel});
  torch::Tensor memory = torch::randn({kN, kS, kModelKeys});
  const Mask key_lengths = Mask::Lengths(torch::tensor({kS, int64_t{2}}), kS);
  torch::Tensor out =
      layer.forward(queries, memory, memory, Mask::Full(kL, kS), Mask::Full(kN, kL), key_lengths);
  std::vector<torch::Tensor> heads;
  for (int64_t h = 0; h < kHeads; ++h) {
    auto rows = [&](const torch::nn::Linear& lin, const torch::Tensor& x, int64_t d) {
      return torch::linear(x, lin->weight.narrow(0, h * d, d), lin->bias.narrow(0, h * d, d));
    };
    torch::Tensor q = rows(layer.query_projection, queries, kKeys);
    torch::Tensor k = rows(layer.key_projection, memory, kKeys);
    torch::Tensor v = rows(layer.value_projection, memory, kValues);
    torch::Tensor scores = torch::einsum("nle,nse->nls", {q, k}) / std::sqrt(double(kKeys));
    scores = scores + key_lengths.additive_matrix().unsqueeze(1);
    heads.push_back(torch::einsum("nls,nsd->nld", {torch::softmax(scores, -1), v}));
  }
  torch::Tensor expected = layer.out_projection->forward(torch::cat(heads, -1));
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-5);
  out.sum().backward();
  EXPECT_TRUE(layer.query_projection->weight.grad().defined());
  EXPECT_GT(layer.key_projection->weight.grad().abs().sum().item<double>(), 0.0);
}

}  // namespace
}  // namespace performer
