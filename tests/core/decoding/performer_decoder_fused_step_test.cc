// The fused decode step (core/models/decode_step_options.h) against the
// separate ops: the same bits with float32 weights on the CPU, bf16 and int8
// weights within their rounding, the branches that cannot fuse falling back, and on
// a GPU the fused step (graphs and eager) against the CPU.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/decoding/performer_decoder.h"
#include "core/models/decode_step_options.h"
#include "core/models/model_weights.h"
#include "core/models/performer_encdec.h"
#include "tests/core/models/model_test_util.h"
#include "tests/testing/cuda_device.h"

namespace performer::decoding {
namespace {

using models::DecodeStepOptions;
using models::PerformerLMConfig;
using models::WeightDtype;
using models::testing::RandomLM;
using models::testing::TinyLMConfig;

struct FusedVariant {
  std::string name;
  std::function<void(PerformerLMConfig&)> apply;
};

std::unique_ptr<PerformerDecoder> Decoder(const PerformerLMConfig& config,
                                          const DecodeStepOptions& step,
                                          torch::Device device = torch::kCPU,
                                          bool cuda_graphs = true) {
  models::LoadedModel model = RandomLM(config, 11);
  model.lm->to(device);
  PerformerDecoderOptions options;
  options.step = step;
  options.cuda_graphs = cuda_graphs;
  absl::StatusOr<std::unique_ptr<PerformerDecoder>> d =
      PerformerDecoder::Create(std::move(model), 4, options);
  EXPECT_TRUE(d.ok()) << d.status();
  return *std::move(d);
}

// Prefills three prompts in both decoders, then steps all three (and a
// subset) 10 times feeding the same tokens, and calls compare(a, b, what)
// on each pair of logits.
void StepBoth(PerformerDecoder& a, PerformerDecoder& b, int64_t vocab,
              const std::function<void(const torch::Tensor&, const torch::Tensor&,
                                       const std::string&)>& compare) {
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4}, {5, 6, 7, 8, 9}};
  std::vector<SequenceId> ia, ib;
  for (const auto& prompt : prompts) {
    ia.push_back(*a.Create());
    ib.push_back(*b.Create());
    ASSERT_TRUE(a.Prefill(ia.back(), {prompt, {}, {}}).ok());
    ASSERT_TRUE(b.Prefill(ib.back(), {prompt, {}, {}}).ok());
  }
  for (int step = 0; step < 10; ++step) {
    const size_t count = step < 7 ? 3 : 1;  // then a subset (rows gathered)
    std::vector<int64_t> tokens;
    for (size_t i = 0; i < count; ++i)
      tokens.push_back((step * 5 + static_cast<int64_t>(i)) % vocab);
    const std::vector<SequenceId> sa(ia.begin(), ia.begin() + static_cast<int64_t>(count));
    const std::vector<SequenceId> sb(ib.begin(), ib.begin() + static_cast<int64_t>(count));
    absl::StatusOr<torch::Tensor> x = a.Step(sa, tokens), y = b.Step(sb, tokens);
    ASSERT_TRUE(x.ok() && y.ok()) << x.status() << " / " << y.status();
    compare(*x, *y, "step " + std::to_string(step));
  }
}

class FusedStepTest : public ::testing::TestWithParam<FusedVariant> {};

TEST_P(FusedStepTest, Float32FusedStepEqualsSeparateOpsBitForBit) {
  PerformerLMConfig config = TinyLMConfig();
  GetParam().apply(config);
  DecodeStepOptions fused;
  fused.fused = true;
  DecodeStepOptions unfused;
  unfused.fused = false;
  auto separate = Decoder(config, unfused);
  auto joined = Decoder(config, fused);
  StepBoth(*joined, *separate, config.num_tokens,
           [](const torch::Tensor& x, const torch::Tensor& y, const std::string& what) {
             EXPECT_TRUE(torch::equal(x, y))
                 << what << ": max |diff| " << (x - y).abs().max().item<float>();
           });
}

// The variant served in `dtype` against float32: within `tolerance` of the
// largest logit, and not the float32 logits exactly.
void ExpectWithinRounding(const FusedVariant& variant, WeightDtype dtype, double tolerance) {
  PerformerLMConfig config = TinyLMConfig();
  variant.apply(config);
  DecodeStepOptions compact;
  compact.weight_dtype = dtype;
  auto reference = Decoder(config, {});
  auto converted = Decoder(config, compact);
  StepBoth(*converted, *reference, config.num_tokens,
           [&](const torch::Tensor& x, const torch::Tensor& y, const std::string& what) {
             const double scale = y.abs().max().item<double>();
             const double diff = (x - y).abs().max().item<double>();
             EXPECT_LE(diff, tolerance * scale) << what;
             EXPECT_GT(diff, 0.0) << what << ": " << models::WeightDtypeName(dtype)
                                  << " weights gave the float32 logits exactly";
           });
}

// 8 mantissa bits: a relative error of 2^-9 per weight, a few percent of the
// largest logit after the layers compound it.
TEST_P(FusedStepTest, Bf16WeightsStayWithinTheirRounding) {
  ExpectWithinRounding(GetParam(), WeightDtype::kBFloat16, 0.03);
}

// int8 with a scale per block of 32: each weight moves by at most half its
// block's step (1/254 of the block's largest), and the AVX-512 path
// quantizes x the same way.
TEST_P(FusedStepTest, Int8WeightsStayWithinTheirRounding) {
  ExpectWithinRounding(GetParam(), WeightDtype::kInt8, 0.06);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, FusedStepTest,
    ::testing::Values(
        FusedVariant{"plain", [](PerformerLMConfig&) {}},
        FusedVariant{"glu_tied_biases",
                     [](PerformerLMConfig& c) {
                       c.ff_glu = true;
                       c.tie_embed = true;
                       c.qkv_bias = true;
                       c.attn_out_bias = false;
                     }},
        FusedVariant{"rotary_local_heads",
                     [](PerformerLMConfig& c) {
                       c.rotary_position_emb = true;
                       c.local_attn_heads = {1};
                       c.local_window_size = 4;
                     }},
        FusedVariant{"generalized", [](PerformerLMConfig& c) { c.generalized_attention = true; }},
        // These fall back to the separate ops (not fused).
        FusedVariant{"scalenorm", [](PerformerLMConfig& c) { c.use_scalenorm = true; }},
        FusedVariant{"rezero_shift",
                     [](PerformerLMConfig& c) {
                       c.use_rezero = true;
                       c.shift_tokens = true;
                     }},
        FusedVariant{"shift_tokens", [](PerformerLMConfig& c) { c.shift_tokens = true; }},
        FusedVariant{"reversible", [](PerformerLMConfig& c) { c.reversible = true; }}),
    [](const ::testing::TestParamInfo<FusedVariant>& info) { return info.param.name; });

// weight_bytes counts each storage once: the fused q/k/v matrix is the one
// copy of the q, k and v weights (their layers view it), and a compact dtype
// replaces the float32 projections, feed-forwards and output head (bf16: 2
// bytes a weight; int8: 1 byte plus a float32 scale per block of 32 inputs).
TEST(DecodeStepOptionsTest, WeightBytesCountEachStorageOnce) {
  const PerformerLMConfig config = TinyLMConfig();  // dim 16, 2 x 8 heads, ff x4, vocab 23
  DecodeStepOptions separate, fused, bf16, int8;
  separate.fused = false;
  fused.fused = true;
  bf16.weight_dtype = WeightDtype::kBFloat16;
  int8.weight_dtype = WeightDtype::kInt8;
  auto a = Decoder(config, separate), b = Decoder(config, fused), c = Decoder(config, bf16);
  auto d = Decoder(config, int8);
  models::LoadedModel model = RandomLM(config, 11);
  int64_t parameters = 0;
  for (const torch::Tensor& t : model.lm->parameters()) parameters += t.numel() * 4;
  for (const torch::Tensor& t : model.lm->buffers()) parameters += t.numel() * t.element_size();
  struct Matrix {
    int64_t out, in;
  };
  const Matrix qkv{48, 16}, out{16, 16}, w1{64, 16}, w2{16, 64}, head{23, 16};
  auto sum = [&](auto bytes) {
    return config.depth * (bytes(qkv) + bytes(out) + bytes(w1) + bytes(w2)) + bytes(head);
  };
  const int64_t fp32 = sum([](Matrix m) { return 4 * m.out * m.in; });
  const int64_t half = sum([](Matrix m) { return 2 * m.out * m.in; });
  const int64_t quarter =
      sum([](Matrix m) { return m.out * m.in + 4 * m.out * ((m.in + 31) / 32); });
  EXPECT_EQ(a->info().weight_bytes, parameters);
  EXPECT_EQ(b->info().weight_bytes, parameters);
  EXPECT_EQ(c->info().weight_bytes, parameters - fp32 + half);
  EXPECT_EQ(d->info().weight_bytes, parameters - fp32 + quarter);
  EXPECT_EQ(a->info().weight_dtype, "fp32");
  EXPECT_EQ(c->info().weight_dtype, "bf16");
  EXPECT_EQ(d->info().weight_dtype, "int8");
}

// An encoder-decoder serves its encoder in the dtype too: every linear layer
// converted, the source encoded and the target decoded within rounding of
// float32.
TEST(DecodeStepOptionsTest, EncoderDecoderServesEveryLayerInTheDtype) {
  models::PerformerEncDecConfig config;
  config.dim = 16;
  config.enc = TinyLMConfig();
  config.enc.causal = false;
  config.dec = TinyLMConfig();
  config.dec.cross_attend = true;
  std::vector<torch::Tensor> reference;
  for (WeightDtype dtype : {WeightDtype::kFloat32, WeightDtype::kBFloat16, WeightDtype::kInt8}) {
    SCOPED_TRACE(models::WeightDtypeName(dtype));
    models::LoadedModel model = models::testing::RandomEncDec(config, 5);
    PerformerDecoderOptions options;
    options.step.weight_dtype = dtype;
    absl::StatusOr<std::unique_ptr<PerformerDecoder>> decoder =
        PerformerDecoder::Create(model, 2, options);
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    for (const auto& m : model.encdec->modules(/*include_self=*/false)) {
      if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get())) {
        EXPECT_EQ(linear->weight.scalar_type(), models::WeightScalarType(dtype));
      }
    }
    const SequenceId id = *(*decoder)->Create();
    std::vector<torch::Tensor> logits;
    absl::StatusOr<torch::Tensor> first = (*decoder)->Prefill(id, {{1, 2, 3}, {4, 5, 6, 7}, {}});
    ASSERT_TRUE(first.ok()) << first.status();
    logits.push_back(*first);
    for (int64_t token : {8, 9, 10}) {
      absl::StatusOr<torch::Tensor> next = (*decoder)->Step({id}, {token});
      ASSERT_TRUE(next.ok()) << next.status();
      logits.push_back((*next)[0]);
    }
    if (reference.empty()) {
      reference = logits;
      continue;
    }
    for (size_t i = 0; i < logits.size(); ++i) {
      const double scale = reference[i].abs().max().item<double>();
      EXPECT_LE((logits[i] - reference[i]).abs().max().item<double>(), 0.06 * scale) << i;
      EXPECT_FALSE(torch::equal(logits[i], reference[i])) << i;
    }
  }
}

TEST(DecodeStepOptionsTest, WeightDtypeNamesRoundTrip) {
  for (WeightDtype d : {WeightDtype::kFloat32, WeightDtype::kBFloat16, WeightDtype::kInt8}) {
    EXPECT_EQ(models::ParseWeightDtype(models::WeightDtypeName(d)), d);
  }
  EXPECT_EQ(models::ParseWeightDtype("int4"), std::nullopt);
  EXPECT_EQ(models::ParseWeightDtype(""), std::nullopt);
  DecodeStepOptions o;
  EXPECT_FALSE(o.UsesFusedStep(/*on_cuda=*/false));
  EXPECT_TRUE(o.UsesFusedStep(/*on_cuda=*/true));
  o.fused = false;
  EXPECT_FALSE(o.UsesFusedStep(true));
  o.weight_dtype = WeightDtype::kBFloat16;
  EXPECT_TRUE(o.UsesFusedStep(false));
  o.weight_dtype = WeightDtype::kInt8;
  EXPECT_TRUE(o.UsesFusedStep(false));
}

// favor_projection_in_step moves the FAVOR+ projection into the CUDA state
// kernel; the CPU ignores it and keeps its bits.
TEST(DecodeStepOptionsTest, FavorProjectionInStepLeavesTheCpuBitsAlone) {
  const PerformerLMConfig config = TinyLMConfig();
  DecodeStepOptions projected;
  projected.fused = true;
  projected.favor_projection_in_step = true;
  DecodeStepOptions fused;
  fused.fused = true;
  auto a = Decoder(config, projected), b = Decoder(config, fused);
  StepBoth(*a, *b, config.num_tokens,
           [](const torch::Tensor& x, const torch::Tensor& y, const std::string& what) {
             EXPECT_TRUE(torch::equal(x, y)) << what;
           });
}

// On a GPU: the fused step, replayed from CUDA graphs and eager, against the
// separate ops on the CPU (float32), and bf16 weights on both devices;
// float32 also with the FAVOR+ projection in the state kernel.
TEST(FusedStepCudaTest, FusedStepOnTheGpuMatchesTheCpu) {
  PERFORMER_REQUIRE_CUDA();
  struct Variant {
    WeightDtype dtype;
    bool projection_in_step;
  };
  for (const Variant& variant :
       {Variant{WeightDtype::kFloat32, false}, Variant{WeightDtype::kFloat32, true},
        Variant{WeightDtype::kBFloat16, false}}) {
    const WeightDtype dtype = variant.dtype;
    for (bool graphs : {true, false}) {
      PerformerLMConfig config = TinyLMConfig();
      DecodeStepOptions step;
      step.fused = true;
      step.weight_dtype = dtype;
      step.favor_projection_in_step = variant.projection_in_step;
      auto gpu = Decoder(config, step, torch::kCUDA, graphs);
      ASSERT_EQ(gpu->info().cuda_graphs, graphs) << gpu->cuda_graphs_status();
      DecodeStepOptions unfused;
      unfused.fused = false;
      auto cpu = Decoder(config, dtype == WeightDtype::kFloat32 ? unfused : step);
      // The CPU's bf16 kernel rounds x to bf16 where it has AVX-512 BF16; the
      // GPU's sums the exact products.
      const double tolerance = dtype == WeightDtype::kFloat32 ? 1e-4 : 3e-2;
      StepBoth(*gpu, *cpu, config.num_tokens,
               [&](const torch::Tensor& x, const torch::Tensor& y, const std::string& what) {
                 const double scale = std::max(1.0, y.abs().max().item<double>());
                 EXPECT_LE((x.cpu() - y).abs().max().item<double>(), tolerance * scale)
                     << what << " " << models::WeightDtypeName(dtype) << " graphs " << graphs
                     << " projection in step " << variant.projection_in_step;
               });
    }
  }
}

}  // namespace
}  // namespace performer::decoding
