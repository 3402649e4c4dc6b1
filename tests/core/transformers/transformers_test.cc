// Batch and recurrent transformer layers: post-norm equations, default
// masks, state-dict names, and batch == step-by-step recurrence for every
// causal model (full and linear self attention, full and linear cross
// attention), including gradients through the recurrent linear attention.
#include "core/transformers/transformers.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <set>

#include "core/recurrent/recurrent_attention_layer.h"
#include "core/recurrent/recurrent_full_attention.h"
#include "core/recurrent/recurrent_linear_attention.h"
#include "core/transformers/recurrent_transformers.h"
#include "tests/core/recurrent/reference_attentions.h"
#include "tests/testing/fixtures.h"

namespace performer {
namespace {

using testing::CountingEluFactory;
using testing::CountingEluFeatureMap;
using testing::FixedExpFactory;
using testing::FixedExpFeatureMap;
using testing::ReferenceFullAttention;
using testing::ReferenceLinearAttention;

constexpr int64_t kN = 2, kL = 7, kModel = 12, kHeads = 3, kKeys = 4, kValues = 6, kFF = 20;
// Cross attention: another head count, per-head sizes and memory width.
constexpr int64_t kS = 5, kMemory = 10, kCrossHeads = 2, kCrossKeys = 3, kCrossValues = 5;

enum class Kind { kFull, kLinear };

// name -> tensor for parameters and buffers (the state dict).
std::map<std::string, torch::Tensor> StateDict(const torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value();
  for (const auto& b : m.named_buffers()) out[b.key()] = b.value();
  return out;
}

std::vector<std::string> ParameterNames(const torch::nn::Module& m) {
  std::vector<std::string> names;
  for (const auto& p : m.named_parameters()) names.push_back(p.key());
  return names;
}

// Copies every tensor of `src` into the same-named tensor of `dst`; both
// must have the same names and shapes.
void LoadInto(const torch::nn::Module& src, torch::nn::Module& dst) {
  torch::NoGradGuard no_grad;
  auto from = StateDict(src);
  auto to = StateDict(dst);
  ASSERT_EQ(from.size(), to.size());
  for (auto& [name, tensor] : to) {
    ASSERT_EQ(from.count(name), 1u) << name;
    ASSERT_EQ(from[name].sizes(), tensor.sizes()) << name;
    tensor.copy_(from[name]);
  }
}

// Randomizes every parameter (LayerNorms included) so that a port that
// ignores one of them fails.
void Randomize(torch::nn::Module& m, int64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) {
    const bool norm_weight =
        p.key().find("norm") != std::string::npos && p.key().find("weight") != std::string::npos;
    if (norm_weight) {
      p.value().uniform_(0.5, 1.5);
    } else {
      p.value().normal_(0.0, 0.3);
    }
  }
}

AttentionPtr BatchSelfInner(Kind kind, int64_t keys) {
  if (kind == Kind::kFull) return std::make_shared<ReferenceFullAttention>();
  return std::make_shared<ReferenceLinearAttention>(std::make_shared<FixedExpFeatureMap>(keys, 9),
                                                    /*causal=*/true);
}
AttentionPtr BatchCrossInner(Kind kind, int64_t keys) {
  if (kind == Kind::kFull) return std::make_shared<ReferenceFullAttention>();
  return std::make_shared<ReferenceLinearAttention>(std::make_shared<FixedExpFeatureMap>(keys, 9),
                                                    /*causal=*/false);
}
RecurrentAttentionPtr RecurrentSelfInner(Kind kind, int64_t keys) {
  if (kind == Kind::kFull) return std::make_shared<RecurrentFullAttentionImpl>();
  return std::make_shared<RecurrentLinearAttentionImpl>(keys, FixedExpFactory(9));
}
RecurrentCrossAttentionPtr RecurrentCrossInner(Kind kind, int64_t keys) {
  if (kind == Kind::kFull) return std::make_shared<RecurrentCrossFullAttentionImpl>();
  return std::make_shared<RecurrentCrossLinearAttentionImpl>(keys, FixedExpFactory(9));
}

TransformerEncoderPtr MakeEncoder(Kind kind, int64_t n_layers, double dropout = 0.1,
                                  const std::string& activation = "gelu") {
  std::vector<TransformerEncoderLayerPtr> layers;
  for (int64_t i = 0; i < n_layers; ++i) {
    auto attention = std::make_shared<AttentionLayerImpl>(BatchSelfInner(kind, kKeys), kModel,
                                                          kHeads, kKeys, kValues);
    layers.push_back(
        std::make_shared<TransformerEncoderLayerImpl>(attention, kModel, kFF, dropout, activation));
  }
  return std::make_shared<TransformerEncoderImpl>(layers, MakeLayerNorm(kModel));
}

RecurrentTransformerEncoderPtr MakeRecurrentEncoder(Kind kind, int64_t n_layers,
                                                    double dropout = 0.1,
                                                    const std::string& activation = "gelu") {
  std::vector<RecurrentTransformerEncoderLayerPtr> layers;
  for (int64_t i = 0; i < n_layers; ++i) {
    auto attention = std::make_shared<RecurrentAttentionLayerImpl>(RecurrentSelfInner(kind, kKeys),
                                                                   kModel, kHeads, kKeys, kValues);
    layers.push_back(std::make_shared<RecurrentTransformerEncoderLayerImpl>(attention, kModel, kFF,
                                                                            dropout, activation));
  }
  return std::make_shared<RecurrentTransformerEncoderImpl>(layers, MakeLayerNorm(kModel));
}

TransformerDecoderPtr MakeDecoder(Kind self_kind, Kind cross_kind, int64_t n_layers) {
  std::vector<TransformerDecoderLayerPtr> layers;
  for (int64_t i = 0; i < n_layers; ++i) {
    auto self_attention = std::make_shared<AttentionLayerImpl>(BatchSelfInner(self_kind, kKeys),
                                                               kModel, kHeads, kKeys, kValues);
    auto cross_attention =
        std::make_shared<AttentionLayerImpl>(BatchCrossInner(cross_kind, kCrossKeys), kModel,
                                             kCrossHeads, kCrossKeys, kCrossValues, kMemory);
    layers.push_back(std::make_shared<TransformerDecoderLayerImpl>(self_attention, cross_attention,
                                                                   kModel, kFF, 0.1, "relu"));
  }
  return std::make_shared<TransformerDecoderImpl>(layers, MakeLayerNorm(kModel));
}

RecurrentTransformerDecoderPtr MakeRecurrentDecoder(Kind self_kind, Kind cross_kind,
                                                    int64_t n_layers) {
  std::vector<RecurrentTransformerDecoderLayerPtr> layers;
  for (int64_t i = 0; i < n_layers; ++i) {
    auto self_attention = std::make_shared<RecurrentAttentionLayerImpl>(
        RecurrentSelfInner(self_kind, kKeys), kModel, kHeads, kKeys, kValues);
    auto cross_attention = std::make_shared<RecurrentCrossAttentionLayerImpl>(
        RecurrentCrossInner(cross_kind, kCrossKeys), kModel, kCrossHeads, kCrossKeys, kCrossValues,
        kMemory);
    layers.push_back(std::make_shared<RecurrentTransformerDecoderLayerImpl>(
        self_attention, cross_attention, kModel, kFF, 0.1, "relu"));
  }
  return std::make_shared<RecurrentTransformerDecoderImpl>(layers, MakeLayerNorm(kModel));
}

torch::Tensor ManualLayerNorm(const torch::Tensor& x, const torch::nn::LayerNorm& norm) {
  torch::Tensor mean = x.mean(-1, true);
  torch::Tensor var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / torch::sqrt(var + 1e-5) * norm->weight + norm->bias;
}

TEST(TransformerEncoderLayerTest, IsPostNormWithExactGelu) {
  auto encoder = MakeEncoder(Kind::kFull, 1);
  Randomize(*encoder, 1);
  encoder->eval();
  const TransformerEncoderLayerPtr& layer = encoder->layers()[0];
  torch::manual_seed(2);
  torch::Tensor x = torch::randn({kN, kL, kModel});
  const Mask lengths = Mask::Lengths(torch::tensor({kL, int64_t{4}}), kL);
  torch::Tensor out = layer->forward(x, Mask::Full(kL), lengths);

  torch::Tensor a = layer->attention->forward(x, x, x, Mask::Full(kL), lengths, lengths);
  torch::Tensor h = ManualLayerNorm(x + a, layer->norm1);
  torch::Tensor u = layer->linear1->forward(h);
  torch::Tensor gelu = 0.5 * u * (1 + torch::erf(u / std::sqrt(2.0)));
  torch::Tensor expected = ManualLayerNorm(h + layer->linear2->forward(gelu), layer->norm2);
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-5);
  EXPECT_EQ(layer->class_name(), "TransformerEncoderLayer");
  EXPECT_EQ(layer->attribute("activation")->as_string(), "gelu");
  EXPECT_DOUBLE_EQ(layer->attribute("dropout.p")->as_float(), 0.1);
  EXPECT_DOUBLE_EQ(layer->norm1->options.eps(), 1e-5);
}

TEST(TransformerEncoderTest, DefaultMasksAreFullAndMasksReachEveryLayer) {
  auto encoder = MakeEncoder(Kind::kFull, 2);
  Randomize(*encoder, 3);
  encoder->eval();
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({kN, kL, kModel});
  torch::Tensor by_default = encoder->forward(x);
  torch::Tensor explicit_full =
      encoder->forward(x, Mask::Full(kL), Mask::Lengths(torch::full({kN}, kL, torch::kLong), kL));
  EXPECT_TRUE(torch::equal(by_default, explicit_full));
  // Key lengths reach the attention: shortening sample 1 leaves sample 0 as is.
  torch::Tensor masked =
      encoder->forward(x, std::nullopt, Mask::Lengths(torch::tensor({kL, int64_t{3}}), kL));
  EXPECT_TENSOR_CLOSE(masked[0], by_default[0], 1e-6, 1e-6);
  EXPECT_GT((masked[1] - by_default[1]).abs().max().item<double>(), 1e-3);
  EXPECT_EQ(encoder->class_name(), "TransformerEncoder");
}

TEST(TransformerEncoderTest, StateDictNamesMatchTheReferenceAndTheRecurrentTwin) {
  auto encoder = MakeEncoder(Kind::kLinear, 1);
  auto recurrent = MakeRecurrentEncoder(Kind::kLinear, 1);
  EXPECT_EQ(
      ParameterNames(*encoder),
      (std::vector<std::string>{
          "layers.0.attention.query_projection.weight", "layers.0.attention.query_projection.bias",
          "layers.0.attention.key_projection.weight", "layers.0.attention.key_projection.bias",
          "layers.0.attention.value_projection.weight", "layers.0.attention.value_projection.bias",
          "layers.0.attention.out_projection.weight", "layers.0.attention.out_projection.bias",
          "layers.0.linear1.weight", "layers.0.linear1.bias", "layers.0.linear2.weight",
          "layers.0.linear2.bias", "layers.0.norm1.weight", "layers.0.norm1.bias",
          "layers.0.norm2.weight", "layers.0.norm2.bias", "norm.weight", "norm.bias"}));
  EXPECT_EQ(ParameterNames(*recurrent), ParameterNames(*encoder));
  auto batch_dict = StateDict(*encoder);
  auto recurrent_dict = StateDict(*recurrent);
  ASSERT_EQ(batch_dict.size(), recurrent_dict.size());
  EXPECT_EQ(batch_dict.count("layers.0.attention.inner_attention.feature_map.omega"), 1u);
  for (const auto& [name, tensor] : batch_dict) {
    ASSERT_EQ(recurrent_dict.count(name), 1u) << name;
    EXPECT_EQ(recurrent_dict[name].sizes(), tensor.sizes()) << name;
  }
  EXPECT_EQ(batch_dict["layers.0.linear1.weight"].sizes(), (std::vector<int64_t>{kFF, kModel}));
  EXPECT_EQ(batch_dict["layers.0.attention.value_projection.weight"].sizes(),
            (std::vector<int64_t>{kHeads * kValues, kModel}));
}

TEST(TransformerDecoderTest, StateDictNamesMatchTheReferenceExample) {
  // TransformerDecoderBuilder(n_layers=1, n_heads=2, query_dimensions=4,
  // value_dimensions=4, feed_forward_dimensions=8): 28 tensors in this order.
  auto self_attention =
      std::make_shared<AttentionLayerImpl>(std::make_shared<ReferenceFullAttention>(), 8, 2, 4, 4);
  auto cross_attention = std::make_shared<AttentionLayerImpl>(
      std::make_shared<ReferenceFullAttention>(), 8, 2, 4, 4, 8);
  auto decoder = std::make_shared<TransformerDecoderImpl>(
      std::vector<TransformerDecoderLayerPtr>{
          std::make_shared<TransformerDecoderLayerImpl>(self_attention, cross_attention, 8, 8)},
      MakeLayerNorm(8));
  std::vector<std::string> expected;
  for (const char* attention : {"self_attention", "cross_attention"}) {
    for (const char* projection : {"query", "key", "value", "out"}) {
      for (const char* tensor : {"weight", "bias"}) {
        expected.push_back(std::string("layers.0.") + attention + "." + projection +
                           "_projection." + tensor);
      }
    }
  }
  for (const char* module : {"linear1", "linear2", "norm1", "norm2", "norm3"}) {
    for (const char* tensor : {"weight", "bias"}) {
      expected.push_back(std::string("layers.0.") + module + "." + tensor);
    }
  }
  expected.push_back("norm.weight");
  expected.push_back("norm.bias");
  EXPECT_EQ(ParameterNames(*decoder), expected);
  EXPECT_EQ(decoder->class_name(), "TransformerDecoder");

  auto recurrent = MakeRecurrentDecoder(Kind::kLinear, Kind::kLinear, 2);
  auto batch = MakeDecoder(Kind::kLinear, Kind::kLinear, 2);
  EXPECT_EQ(ParameterNames(*recurrent), ParameterNames(*batch));
  auto batch_dict = StateDict(*batch);
  auto recurrent_dict = StateDict(*recurrent);
  ASSERT_EQ(batch_dict.size(), recurrent_dict.size());
  for (const auto& [name, tensor] : batch_dict) {
    ASSERT_EQ(recurrent_dict.count(name), 1u) << name;
    EXPECT_EQ(recurrent_dict[name].sizes(), tensor.sizes()) << name;
  }
  EXPECT_EQ(batch_dict["layers.1.cross_attention.key_projection.weight"].sizes(),
            (std::vector<int64_t>{kCrossHeads * kCrossKeys, kMemory}));
}

// Steps x[:, i] through a recurrent encoder and stacks the outputs.
torch::Tensor RunRecurrentEncoder(RecurrentTransformerEncoderImpl& model, const torch::Tensor& x,
                                  RecurrentEncoderState& state) {
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < x.size(1); ++i) outs.push_back(model.forward(x.select(1, i), state));
  return torch::stack(outs, 1);
}

TEST(RecurrentTransformerEncoderTest, MatchesTheCausalBatchEncoderStepByStep) {
  for (Kind kind : {Kind::kLinear, Kind::kFull}) {
    SCOPED_TRACE(kind == Kind::kFull ? "full" : "linear");
    auto batch = MakeEncoder(kind, 2);
    auto recurrent = MakeRecurrentEncoder(kind, 2);
    Randomize(*batch, 5);
    LoadInto(*batch, *recurrent);
    batch->eval();
    recurrent->eval();
    torch::manual_seed(6);
    torch::Tensor x = torch::randn({kN, kL, kModel});
    torch::Tensor expected = batch->forward(x, Mask::TriangularCausal(kL));
    RecurrentEncoderState state;
    torch::Tensor out = RunRecurrentEncoder(*recurrent, x, state);
    EXPECT_TENSOR_CLOSE(out, expected, 2e-5, 1e-4);
    EXPECT_EQ(recurrent->class_name(), "RecurrentTransformerEncoder");
    EXPECT_EQ(recurrent->layers()[0]->class_name(), "RecurrentTransformerEncoderLayer");

    ASSERT_EQ(state.layers.size(), 2u);
    auto named = NamedStateTensors(state);
    EXPECT_EQ(named.size(), 4u);
    EXPECT_TRUE(named.at("layers.1.0").is_same(StateTensors(state.layers[1])[0]));
    for (const AttentionState& layer_state : state.layers) {
      if (kind == Kind::kFull) {
        const auto& s = std::get<RecurrentFullState>(layer_state);
        EXPECT_EQ(s.keys.sizes(), (std::vector<int64_t>{kN, kHeads, kL, kKeys}));
        EXPECT_EQ(s.values.sizes(), (std::vector<int64_t>{kN, kHeads, kL, kValues}));
      } else {
        const auto& s = std::get<RecurrentLinearState>(layer_state);
        EXPECT_EQ(s.kv.sizes(), (std::vector<int64_t>{kN, kHeads, 9, kValues}));
        EXPECT_EQ(s.normalizer.sizes(), (std::vector<int64_t>{kN, kHeads, 9}));
      }
    }
  }
}

TEST(RecurrentTransformerEncoderTest, RejectsAStateOfAnotherModel) {
  auto recurrent = MakeRecurrentEncoder(Kind::kFull, 2);
  RecurrentEncoderState state;
  state.layers.resize(3);
  EXPECT_THROW(recurrent->forward(torch::randn({kN, kModel}), state), c10::Error);
  EXPECT_THROW(MakeRecurrentEncoder(Kind::kFull, 1, 0.1, "tanh"), c10::Error);
}

TEST(RecurrentTransformerEncoderTest, GradientsMatchTheBatchEncoder) {
  // Training through the recurrence (dropout 0 so that train mode is
  // deterministic): parameter gradients equal the batch model's.
  auto batch = MakeEncoder(Kind::kLinear, 2, /*dropout=*/0.0, "relu");
  auto recurrent = MakeRecurrentEncoder(Kind::kLinear, 2, /*dropout=*/0.0, "relu");
  Randomize(*batch, 7);
  LoadInto(*batch, *recurrent);
  torch::manual_seed(8);
  torch::Tensor x = torch::randn({kN, kL, kModel});
  torch::Tensor weights = torch::randn({kN, kL, kModel});
  (batch->forward(x, Mask::TriangularCausal(kL)) * weights).sum().backward();
  RecurrentEncoderState state;
  (RunRecurrentEncoder(*recurrent, x, state) * weights).sum().backward();
  auto batch_params = batch->named_parameters();
  for (const auto& p : recurrent->named_parameters()) {
    SCOPED_TRACE(p.key());
    ASSERT_TRUE(p.value().grad().defined());
    EXPECT_TENSOR_CLOSE(p.value().grad(), batch_params[p.key()].grad(), 1e-4, 1e-3);
  }
}

struct DecoderInputs {
  torch::Tensor x, memory;
  Mask memory_lengths;
};

DecoderInputs MakeDecoderInputs(int64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({kN, kL, kModel}), torch::randn({kN, kS, kMemory}),
          Mask::Lengths(torch::tensor({kS, int64_t{3}}), kS)};
}

TEST(RecurrentTransformerDecoderTest, MatchesTheCausalBatchDecoderStepByStep) {
  for (Kind self_kind : {Kind::kFull, Kind::kLinear}) {
    for (Kind cross_kind : {Kind::kFull, Kind::kLinear}) {
      SCOPED_TRACE(std::string(self_kind == Kind::kFull ? "full" : "linear") + " self, " +
                   (cross_kind == Kind::kFull ? "full" : "linear") + " cross");
      auto batch = MakeDecoder(self_kind, cross_kind, 2);
      auto recurrent = MakeRecurrentDecoder(self_kind, cross_kind, 2);
      Randomize(*batch, 9);
      LoadInto(*batch, *recurrent);
      batch->eval();
      recurrent->eval();
      DecoderInputs in = MakeDecoderInputs(10);
      torch::Tensor expected = batch->forward(in.x, in.memory, Mask::TriangularCausal(kL),
                                              std::nullopt, std::nullopt, in.memory_lengths);
      RecurrentDecoderState state;
      std::vector<torch::Tensor> outs;
      for (int64_t i = 0; i < kL; ++i) {
        outs.push_back(recurrent->forward(in.x.select(1, i), in.memory, in.memory_lengths, state));
      }
      EXPECT_TENSOR_CLOSE(torch::stack(outs, 1), expected, 2e-5, 1e-4);
      EXPECT_EQ(recurrent->class_name(), "RecurrentTransformerDecoder");
      EXPECT_EQ(recurrent->layers()[0]->class_name(), "RecurrentTransformerDecoderLayer");

      ASSERT_EQ(state.layers.size(), 2u);
      auto named = NamedStateTensors(state);
      EXPECT_EQ(named.size(), 8u);
      EXPECT_TRUE(named.at("layers.0.cross.1").is_same(StateTensors(state.layers[0].cross)[1]));
      for (const RecurrentDecoderLayerState& layer : state.layers) {
        if (self_kind == Kind::kFull) {
          EXPECT_EQ(std::get<RecurrentFullState>(layer.self).keys.sizes(),
                    (std::vector<int64_t>{kN, kHeads, kL, kKeys}));
        } else {
          EXPECT_EQ(std::get<RecurrentLinearState>(layer.self).kv.sizes(),
                    (std::vector<int64_t>{kN, kHeads, 9, kValues}));
        }
        if (cross_kind == Kind::kFull) {
          const auto& cross = std::get<CrossFullState>(layer.cross);
          EXPECT_EQ(cross.keys.sizes(), (std::vector<int64_t>{kN, kS, kCrossHeads, kCrossKeys}));
          EXPECT_EQ(cross.values.sizes(),
                    (std::vector<int64_t>{kN, kS, kCrossHeads, kCrossValues}));
        } else {
          const auto& cross = std::get<CrossLinearState>(layer.cross);
          EXPECT_EQ(cross.kv.sizes(), (std::vector<int64_t>{kN, kCrossHeads, kCrossValues, 9}));
          EXPECT_EQ(cross.normalizer.sizes(), (std::vector<int64_t>{kN, kCrossHeads, 9}));
        }
      }
    }
  }
}

TEST(RecurrentTransformerDecoderTest, NeedsTheMemoryOnlyOnTheFirstStep) {
  for (Kind cross_kind : {Kind::kFull, Kind::kLinear}) {
    SCOPED_TRACE(cross_kind == Kind::kFull ? "full cross" : "linear cross");
    auto recurrent = MakeRecurrentDecoder(Kind::kLinear, cross_kind, 2);
    Randomize(*recurrent, 11);
    recurrent->eval();
    DecoderInputs in = MakeDecoderInputs(12);
    // Full memory lengths here: the default mask after the first step comes
    // from the state (full cross) or is not read (linear cross).
    RecurrentDecoderState with_memory, without_memory;
    for (int64_t i = 0; i < kL; ++i) {
      torch::Tensor a = recurrent->forward(in.x.select(1, i), in.memory, std::nullopt, with_memory);
      torch::Tensor b = recurrent->forward(in.x.select(1, i), i == 0 ? in.memory : torch::Tensor(),
                                           std::nullopt, without_memory);
      EXPECT_TRUE(torch::equal(a, b)) << "step " << i;
    }
    RecurrentDecoderState fresh;
    EXPECT_THROW(recurrent->forward(in.x.select(1, 0), torch::Tensor(), std::nullopt, fresh),
                 c10::Error);
  }
}

TEST(TransformerDecoderTest, DefaultMasksAreFull) {
  auto decoder = MakeDecoder(Kind::kFull, Kind::kFull, 1);
  Randomize(*decoder, 13);
  decoder->eval();
  DecoderInputs in = MakeDecoderInputs(14);
  torch::Tensor by_default = decoder->forward(in.x, in.memory);
  torch::Tensor explicit_full = decoder->forward(
      in.x, in.memory, Mask::Full(kL), Mask::Lengths(torch::full({kN}, kL, torch::kLong), kL),
      Mask::Full(kL, kS), Mask::Lengths(torch::full({kN}, kS, torch::kLong), kS));
  EXPECT_TRUE(torch::equal(by_default, explicit_full));
  EXPECT_EQ(decoder->layers()[0]->class_name(), "TransformerDecoderLayer");
}

TEST(ActivationTest, GeluIsTheExactErfForm) {
  // In float64 so that the exact and tanh forms (which differ by up to ~5e-4)
  // are told apart far beyond rounding.
  torch::Tensor x = torch::linspace(-4, 4, 101, torch::kDouble);
  torch::Tensor gelu = ApplyActivation(Activation::kGelu, x);
  EXPECT_TENSOR_CLOSE(gelu, 0.5 * x * (1 + torch::erf(x / std::sqrt(2.0))), 1e-12, 1e-12);
  torch::Tensor tanh_form =
      0.5 * x * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
  EXPECT_GT((gelu - tanh_form).abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(torch::equal(ApplyActivation(Activation::kRelu, x), torch::relu(x)));
  EXPECT_THROW(ParseActivation("tanh"), c10::Error);
}

}  // namespace
}  // namespace performer
