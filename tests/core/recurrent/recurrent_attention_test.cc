// Recurrent self/cross attentions against dense batch formulas, their state
// layouts, in-place updates, gradients and registration.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/attention/attention_registries.h"
#include "core/feature_maps/feature_map_catalogue.h"
#include "core/recurrent/recurrent_attention_layer.h"
#include "core/recurrent/recurrent_full_attention.h"
#include "core/recurrent/recurrent_linear_attention.h"
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

constexpr int64_t kN = 2, kL = 6, kH = 3, kE = 4, kD = 5;

struct Qkv {
  torch::Tensor q, k, v;  // (N,L,H,E), (N,L,H,E), (N,L,H,D)
};

Qkv RandomQkv(int64_t seed, int64_t s = kL) {
  torch::manual_seed(seed);
  return {torch::randn({kN, kL, kH, kE}), torch::randn({kN, s, kH, kE}),
          torch::randn({kN, s, kH, kD})};
}

// Runs a recurrent self attention over the L steps of (N,L,H,*) inputs and
// stacks the outputs to (N,L,H,D).
torch::Tensor RunSteps(RecurrentAttentionImpl& attention, const Qkv& x, AttentionState& state) {
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < x.q.size(1); ++i) {
    outs.push_back(attention.forward(x.q.select(1, i), x.k.select(1, i), x.v.select(1, i), state));
  }
  return torch::stack(outs, 1);
}

TEST(RecurrentFullAttentionTest, MatchesCausalSoftmaxAndGrowsItsState) {
  for (std::optional<double> temp : {std::optional<double>(), std::optional<double>(0.3)}) {
    Qkv x = RandomQkv(1);
    RecurrentFullAttentionImpl recurrent(temp, /*attention_dropout=*/0.1);
    recurrent.eval();
    AttentionState state;
    torch::Tensor out = RunSteps(recurrent, x, state);
    ReferenceFullAttention batch(temp);
    torch::Tensor expected = batch.forward(x.q, x.k, x.v, Mask::TriangularCausal(kL),
                                           Mask::Full(kN, kL), Mask::Full(kN, kL));
    EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-5);
    const auto* full = std::get_if<RecurrentFullState>(&state);
    ASSERT_NE(full, nullptr);
    // Heads before time: (N,H,t,E) and (N,H,t,D).
    EXPECT_EQ(full->keys.sizes(), (std::vector<int64_t>{kN, kH, kL, kE}));
    EXPECT_EQ(full->values.sizes(), (std::vector<int64_t>{kN, kH, kL, kD}));
    EXPECT_TRUE(torch::equal(full->keys, x.k.permute({0, 2, 1, 3})));
    EXPECT_TRUE(torch::equal(full->values, x.v.permute({0, 2, 1, 3})));
  }
}

TEST(RecurrentFullAttentionTest, TemperatureZeroMeansDefault) {
  Qkv x = RandomQkv(2);
  RecurrentFullAttentionImpl zero(0.0, 0.0), unset(std::nullopt, 0.0);
  AttentionState s1, s2;
  EXPECT_TRUE(torch::equal(RunSteps(zero, x, s1), RunSteps(unset, x, s2)));
  EXPECT_EQ(unset.class_name(), "RecurrentFullAttention");
  EXPECT_TRUE(unset.attribute("softmax_temp")->is_none());
  EXPECT_DOUBLE_EQ(RecurrentFullAttentionImpl(0.5, 0.2).attribute("dropout.p")->as_float(), 0.2);
}

TEST(RecurrentFullAttentionTest, RejectsBatchSizeChangeAndForeignState) {
  Qkv x = RandomQkv(3);
  RecurrentFullAttentionImpl attention;
  AttentionState state;
  attention.forward(x.q.select(1, 0), x.k.select(1, 0), x.v.select(1, 0), state);
  EXPECT_THROW(attention.forward(x.q.select(1, 1).narrow(0, 0, 1), x.k.select(1, 1).narrow(0, 0, 1),
                                 x.v.select(1, 1).narrow(0, 0, 1), state),
               c10::Error);
  AttentionState linear_state =
      RecurrentLinearState{torch::zeros({kN, kH, kE, kD}), torch::zeros({kN, kH, kE})};
  EXPECT_THROW(
      attention.forward(x.q.select(1, 0), x.k.select(1, 0), x.v.select(1, 0), linear_state),
      c10::Error);
}

TEST(RecurrentLinearAttentionTest, MatchesCausalLinearAttentionWithStateLayout) {
  constexpr int64_t kF = 7;  // F differs from E and D so the layout is visible.
  Qkv x = RandomQkv(4);
  RecurrentLinearAttentionImpl recurrent(kE, FixedExpFactory(kF));
  AttentionState state;
  torch::Tensor out = RunSteps(recurrent, x, state);
  ReferenceLinearAttention batch(std::make_shared<FixedExpFeatureMap>(kE, kF), /*causal=*/true);
  torch::Tensor expected = batch.forward(x.q, x.k, x.v, Mask::TriangularCausal(kL),
                                         Mask::Full(kN, kL), Mask::Full(kN, kL));
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-4);
  const auto* linear = std::get_if<RecurrentLinearState>(&state);
  ASSERT_NE(linear, nullptr);
  EXPECT_EQ(linear->kv.sizes(), (std::vector<int64_t>{kN, kH, kF, kD}));
  EXPECT_EQ(linear->normalizer.sizes(), (std::vector<int64_t>{kN, kH, kF}));
  torch::Tensor phi_k = recurrent.feature_map()->forward_keys(x.k);  // (N,L,H,F)
  EXPECT_TENSOR_CLOSE(linear->kv, torch::einsum("nlhf,nlhd->nhfd", {phi_k, x.v}), 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(linear->normalizer, phi_k.sum(1).contiguous(), 1e-5, 1e-5);
  EXPECT_EQ(recurrent.class_name(), "RecurrentLinearAttention");
  EXPECT_DOUBLE_EQ(recurrent.attribute("eps")->as_float(), 1e-6);
}

TEST(RecurrentLinearAttentionTest, DefaultsToTheEluFeatureMap) {
  Qkv x = RandomQkv(14);
  RecurrentLinearAttentionImpl recurrent(kE);
  EXPECT_EQ(recurrent.feature_map()->class_name(), "ActivationFunctionFeatureMap");
  EXPECT_TRUE(torch::allclose(recurrent.feature_map()->forward(x.q), torch::elu(x.q) + 1));
  RecurrentCrossLinearAttentionImpl cross(kE);
  EXPECT_EQ(cross.feature_map()->class_name(), "ActivationFunctionFeatureMap");
}

TEST(RecurrentLinearAttentionTest, MatchesCausalLinearAttentionWithAFrozenFavorMap) {
  // One sampled, frozen Favor map shared by the batch formula and the
  // recurrent module: the recurrence must not resample it.
  absl::StatusOr<NamedFeatureMapFactory> favor =
      MakeFeatureMapFactory("Favor", nlohmann::json{{"n_dims", 16}});
  ASSERT_TRUE(favor.ok()) << favor.status();
  torch::manual_seed(15);
  FeatureMapPtr map = favor->make(kE);
  map->new_feature_map(torch::kCPU);
  map->set_frozen(true);
  const NamedFeatureMapFactory shared{"shared Favor", [map](int64_t) { return map; }};
  Qkv x = RandomQkv(16);
  RecurrentLinearAttentionImpl recurrent(kE, shared);
  AttentionState state;
  torch::Tensor out = RunSteps(recurrent, x, state);
  ReferenceLinearAttention batch(map, /*causal=*/true);
  torch::Tensor expected = batch.forward(x.q, x.k, x.v, Mask::TriangularCausal(kL),
                                         Mask::Full(kN, kL), Mask::Full(kN, kL));
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-4);
  EXPECT_EQ(std::get<RecurrentLinearState>(state).kv.sizes(),
            (std::vector<int64_t>{kN, kH, 16, kD}));
}

TEST(RecurrentLinearAttentionTest, ResamplesFeatureMapOnlyOnFirstStep) {
  Qkv x = RandomQkv(5);
  RecurrentLinearAttentionImpl recurrent(kE, CountingEluFactory());
  auto* fm = dynamic_cast<CountingEluFeatureMap*>(recurrent.feature_map().get());
  ASSERT_NE(fm, nullptr);
  AttentionState state;
  RunSteps(recurrent, x, state);
  EXPECT_EQ(fm->new_feature_map_calls, 1);
  AttentionState fresh;
  recurrent.forward(x.q.select(1, 0), x.k.select(1, 0), x.v.select(1, 0), fresh);
  EXPECT_EQ(fm->new_feature_map_calls, 2);
}

TEST(RecurrentLinearAttentionTest, UpdatesStateInPlaceWithoutAutograd) {
  Qkv x = RandomQkv(6);
  RecurrentLinearAttentionImpl recurrent(kE, CountingEluFactory());
  AttentionState state;
  recurrent.forward(x.q.select(1, 0), x.k.select(1, 0), x.v.select(1, 0), state);
  const RecurrentLinearState before = std::get<RecurrentLinearState>(state);
  const torch::Tensor kv_copy = before.kv.clone();
  recurrent.forward(x.q.select(1, 1), x.k.select(1, 1), x.v.select(1, 1), state);
  const RecurrentLinearState& after = std::get<RecurrentLinearState>(state);
  // The same storage was updated: the caller's handle sees the new sum.
  EXPECT_EQ(after.kv.data_ptr(), before.kv.data_ptr());
  EXPECT_EQ(after.normalizer.data_ptr(), before.normalizer.data_ptr());
  EXPECT_FALSE(torch::equal(before.kv, kv_copy));
  EXPECT_TRUE(torch::equal(before.kv, after.kv));
}

TEST(RecurrentLinearAttentionTest, GradientsFlowThroughTheRecurrence) {
  Qkv x = RandomQkv(7);
  x.q.requires_grad_(true);
  x.k.requires_grad_(true);
  x.v.requires_grad_(true);
  RecurrentLinearAttentionImpl recurrent(kE, CountingEluFactory());
  AttentionState state;
  torch::Tensor out = RunSteps(recurrent, x, state);
  torch::Tensor weights = torch::linspace(-1, 1, out.numel()).reshape(out.sizes());
  auto grads = torch::autograd::grad({(out * weights).sum()}, {x.q, x.k, x.v});

  ReferenceLinearAttention batch(std::make_shared<CountingEluFeatureMap>(kE), /*causal=*/true);
  torch::Tensor expected = batch.forward(x.q, x.k, x.v, Mask::TriangularCausal(kL),
                                         Mask::Full(kN, kL), Mask::Full(kN, kL));
  auto expected_grads = torch::autograd::grad({(expected * weights).sum()}, {x.q, x.k, x.v});
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    EXPECT_GT(grads[i].abs().sum().item<double>(), 0.0);
    EXPECT_TENSOR_CLOSE(grads[i], expected_grads[i], 1e-5, 1e-4);
  }
}

TEST(RecurrentLinearAttentionTest, RejectsBatchSizeChange) {
  Qkv x = RandomQkv(8);
  RecurrentLinearAttentionImpl recurrent(kE, CountingEluFactory());
  AttentionState state;
  recurrent.forward(x.q.select(1, 0), x.k.select(1, 0), x.v.select(1, 0), state);
  try {
    recurrent.forward(x.q.select(1, 1).narrow(0, 0, 1), x.k.select(1, 1).narrow(0, 0, 1),
                      x.v.select(1, 1).narrow(0, 0, 1), state);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("The batch size changed during iteration"),
              std::string::npos);
  }
}

// Cross attention over a memory of S = 5 positions with key lengths [5, 3].
constexpr int64_t kS = 5;

Mask CrossKeyLengths() { return Mask::Lengths(torch::tensor({kS, int64_t{3}}), kS); }

TEST(RecurrentCrossFullAttentionTest, MatchesFullAttentionAndKeepsTheMemory) {
  Qkv x = RandomQkv(9, kS);
  RecurrentCrossFullAttentionImpl recurrent(std::nullopt, 0.1);
  recurrent.eval();
  AttentionState state;
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < kL; ++i) {
    // After the first step the memory lives in the state: pass none.
    outs.push_back(recurrent.forward(x.q.select(1, i), i == 0 ? x.k : torch::Tensor(),
                                     i == 0 ? x.v : torch::Tensor(), CrossKeyLengths(), state));
  }
  ReferenceFullAttention batch;
  torch::Tensor expected =
      batch.forward(x.q, x.k, x.v, Mask::Full(kL, kS), Mask::Full(kN, kL), CrossKeyLengths());
  EXPECT_TENSOR_CLOSE(torch::stack(outs, 1), expected, 1e-5, 1e-5);
  const auto* cross = std::get_if<CrossFullState>(&state);
  ASSERT_NE(cross, nullptr);
  // Sequence before heads: (N,S,H,E), (N,S,H,D).
  EXPECT_TRUE(torch::equal(cross->keys, x.k));
  EXPECT_TRUE(torch::equal(cross->values, x.v));
  EXPECT_EQ(recurrent.class_name(), "RecurrentCrossFullAttention");
}

TEST(RecurrentCrossLinearAttentionTest, MatchesLinearAttentionWithTransposedState) {
  constexpr int64_t kF = 7;
  Qkv x = RandomQkv(10, kS);
  RecurrentCrossLinearAttentionImpl recurrent(kE, FixedExpFactory(kF));
  AttentionState state;
  std::vector<torch::Tensor> outs;
  for (int64_t i = 0; i < kL; ++i) {
    outs.push_back(recurrent.forward(x.q.select(1, i), i == 0 ? x.k : torch::Tensor(),
                                     i == 0 ? x.v : torch::Tensor(), CrossKeyLengths(), state));
  }
  ReferenceLinearAttention batch(std::make_shared<FixedExpFeatureMap>(kE, kF), /*causal=*/false);
  torch::Tensor expected =
      batch.forward(x.q, x.k, x.v, Mask::Full(kL, kS), Mask::Full(kN, kL), CrossKeyLengths());
  EXPECT_TENSOR_CLOSE(torch::stack(outs, 1), expected, 1e-5, 1e-4);
  const auto* cross = std::get_if<CrossLinearState>(&state);
  ASSERT_NE(cross, nullptr);
  // KV is (N,H,D,F): transposed relative to the self-attention state.
  EXPECT_EQ(cross->kv.sizes(), (std::vector<int64_t>{kN, kH, kD, kF}));
  EXPECT_EQ(cross->normalizer.sizes(), (std::vector<int64_t>{kN, kH, kF}));
  torch::Tensor keep = CrossKeyLengths().float_matrix().unsqueeze(-1).unsqueeze(-1);
  torch::Tensor phi_k = recurrent.feature_map()->forward_keys(x.k) * keep;
  EXPECT_TENSOR_CLOSE(cross->kv, torch::einsum("nshd,nshf->nhdf", {x.v, phi_k}), 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(cross->normalizer, phi_k.sum(1).contiguous(), 1e-5, 1e-5);
  EXPECT_EQ(recurrent.class_name(), "RecurrentCrossLinearAttention");
}

TEST(RecurrentCrossLinearAttentionTest, ResamplesFeatureMapOnlyOnFirstStep) {
  Qkv x = RandomQkv(11, kS);
  RecurrentCrossLinearAttentionImpl recurrent(kE, CountingEluFactory());
  auto* fm = dynamic_cast<CountingEluFeatureMap*>(recurrent.feature_map().get());
  ASSERT_NE(fm, nullptr);
  AttentionState state;
  for (int64_t i = 0; i < 3; ++i) {
    recurrent.forward(x.q.select(1, i), x.k, x.v, CrossKeyLengths(), state);
  }
  EXPECT_EQ(fm->new_feature_map_calls, 1);
}

TEST(RecurrentAttentionLayerTest, ProjectsHeadMajorLikeTheBatchLayer) {
  // A self layer with a full inner attention: output of step i equals the
  // projections computed by hand, head by head.
  constexpr int64_t kModel = 12, kHeads = 3, kKeys = 2, kValues = 5;
  torch::manual_seed(12);
  auto layer = std::make_shared<RecurrentAttentionLayerImpl>(
      std::make_shared<RecurrentFullAttentionImpl>(std::nullopt, 0.0), kModel, kHeads, kKeys,
      kValues);
  std::vector<std::string> names;
  for (const auto& p : layer->named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"query_projection.weight", "query_projection.bias",
                                             "key_projection.weight", "key_projection.bias",
                                             "value_projection.weight", "value_projection.bias",
                                             "out_projection.weight", "out_projection.bias"}));
  EXPECT_EQ(layer->query_projection->weight.sizes(),
            (std::vector<int64_t>{kHeads * kKeys, kModel}));
  EXPECT_EQ(layer->out_projection->weight.sizes(),
            (std::vector<int64_t>{kModel, kHeads * kValues}));
  torch::Tensor x = torch::randn({kN, kL, kModel});
  AttentionState state;
  torch::Tensor last;
  for (int64_t i = 0; i < kL; ++i) {
    torch::Tensor xi = x.select(1, i);
    last = layer->forward(xi, xi, xi, state);
  }
  // By hand for the last step: head h uses rows h*d..(h+1)*d of each projection.
  std::vector<torch::Tensor> heads;
  for (int64_t h = 0; h < kHeads; ++h) {
    auto rows = [&](const torch::nn::Linear& lin, int64_t d) {
      return torch::linear(x, lin->weight.narrow(0, h * d, d), lin->bias.narrow(0, h * d, d));
    };
    torch::Tensor q = rows(layer->query_projection, kKeys).select(1, kL - 1);  // (N,dk)
    torch::Tensor k = rows(layer->key_projection, kKeys);                      // (N,L,dk)
    torch::Tensor v = rows(layer->value_projection, kValues);                  // (N,L,dv)
    torch::Tensor a =
        torch::softmax(torch::einsum("ne,nle->nl", {q, k}) / std::sqrt(double(kKeys)), -1);
    heads.push_back(torch::einsum("nl,nld->nd", {a, v}));
  }
  torch::Tensor expected = layer->out_projection->forward(torch::cat(heads, -1));
  EXPECT_TENSOR_CLOSE(last, expected, 1e-5, 1e-5);
  EXPECT_EQ(layer->class_name(), "RecurrentAttentionLayer");
}

TEST(RecurrentCrossAttentionLayerTest, ProjectsTheMemoryOnlyOnTheFirstStep) {
  constexpr int64_t kModel = 12, kHeads = 3, kMemory = 9;
  torch::manual_seed(13);
  auto layer = std::make_shared<RecurrentCrossAttentionLayerImpl>(
      std::make_shared<RecurrentCrossFullAttentionImpl>(std::nullopt, 0.0), kModel, kHeads,
      std::nullopt, std::nullopt, kMemory);
  EXPECT_EQ(layer->key_projection->weight.sizes(), (std::vector<int64_t>{kModel, kMemory}));
  torch::Tensor x = torch::randn({kN, kL, kModel});
  torch::Tensor memory = torch::randn({kN, kS, kMemory});
  AttentionState with_memory, without_memory;
  for (int64_t i = 0; i < kL; ++i) {
    torch::Tensor a =
        layer->forward(x.select(1, i), memory, memory, CrossKeyLengths(), with_memory);
    // The memory is ignored once the state holds its projection.
    torch::Tensor ignored = i == 0 ? memory : torch::zeros_like(memory);
    torch::Tensor b =
        layer->forward(x.select(1, i), ignored, ignored, CrossKeyLengths(), without_memory);
    EXPECT_TRUE(torch::equal(a, b));
  }
  const auto& cross = std::get<CrossFullState>(with_memory);
  EXPECT_EQ(cross.keys.sizes(), (std::vector<int64_t>{kN, kS, kHeads, kModel / kHeads}));
  EXPECT_TENSOR_CLOSE(
      cross.keys, layer->key_projection->forward(memory).reshape({kN, kS, kHeads, -1}), 1e-6, 1e-6);
}

TEST(RecurrentRegistryTest, RegistersTheReferenceNamesAndSpecs) {
  RecurrentAttentionRegistry recurrent;
  RecurrentCrossAttentionRegistry cross;
  ASSERT_TRUE(RegisterRecurrentFullAttention(recurrent).ok());
  ASSERT_TRUE(RegisterRecurrentLinearAttention(recurrent).ok());
  ASSERT_TRUE(RegisterRecurrentCrossFullAttention(cross).ok());
  ASSERT_TRUE(RegisterRecurrentCrossLinearAttention(cross).ok());
  EXPECT_EQ(recurrent.keys(), (std::vector<std::string>{"full", "linear", "causal-linear"}));
  EXPECT_EQ(cross.keys(), (std::vector<std::string>{"full", "linear"}));
  // Registering twice fails.
  EXPECT_FALSE(RegisterRecurrentFullAttention(recurrent).ok());

  auto full = recurrent.Create("full", {}, {{"softmax_temp", ParamValue(0.25)}});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ((*full)->class_name(), "RecurrentFullAttention");
  EXPECT_DOUBLE_EQ((*full)->attribute("softmax_temp")->as_float(), 0.25);
  EXPECT_DOUBLE_EQ((*full)->attribute("dropout.p")->as_float(), 0.1);

  for (const char* name : {"linear", "causal-linear"}) {
    auto linear = recurrent.Create(
        name, {}, {{"query_dimensions", ParamValue("4")}, {"feature_map", CountingEluFactory()}});
    ASSERT_TRUE(linear.ok()) << linear.status();
    EXPECT_EQ((*linear)->class_name(), "RecurrentLinearAttention");
    EXPECT_EQ((*linear)->attribute("query_dimensions")->as_int(), 4);
  }
  auto missing = recurrent.Create("linear", {}, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "Invalid value None for parameter 'query_dimensions'");
  // A decorated module lands in the first constructor argument.
  auto composed = recurrent.Create("linear", {*full}, {{"query_dimensions", ParamValue(4)}});
  ASSERT_FALSE(composed.ok());
  EXPECT_EQ(composed.status().message(),
            "RecurrentLinearAttention.__init__() got multiple values for argument "
            "'query_dimensions'");

  auto cross_linear = cross.Create(
      "linear", {}, {{"query_dimensions", ParamValue(4)}, {"feature_map", FixedExpFactory(6)}});
  ASSERT_TRUE(cross_linear.ok()) << cross_linear.status();
  EXPECT_EQ((*cross_linear)->class_name(), "RecurrentCrossLinearAttention");
  auto cross_full = cross.Create("full", {}, {{"attention_dropout", ParamValue(0)}});
  ASSERT_TRUE(cross_full.ok()) << cross_full.status();
  EXPECT_EQ((*cross_full)->class_name(), "RecurrentCrossFullAttention");
  EXPECT_DOUBLE_EQ((*cross_full)->attribute("dropout.p")->as_float(), 0.0);
}

}  // namespace
}  // namespace performer
