#include "core/models/fast_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/feature_maps/performer_kernels.h"
#include "kernels/favor_features.h"
#include "tests/testing/cuda_device.h"

namespace performer::models {
namespace {

constexpr int64_t kBatch = 2, kHeads = 3, kLength = 37, kDim = 8, kFeatures = 13;

struct Variant {
  std::string name;
  bool causal;
  bool generalized;
  KernelFunction kernel_fn;
  bool no_projection;
};

std::vector<Variant> Variants() {
  std::vector<Variant> variants;
  for (bool causal : {true, false}) {
    const std::string suffix = causal ? " causal" : " non-causal";
    variants.push_back({"softmax" + suffix, causal, false, KernelFunction::kReLU, false});
    variants.push_back({"relu" + suffix, causal, true, KernelFunction::kReLU, false});
    variants.push_back({"gelu" + suffix, causal, true, KernelFunction::kGELU, false});
    variants.push_back({"no projection" + suffix, causal, false, KernelFunction::kReLU, true});
  }
  return variants;
}

FastAttention MakeAttention(const Variant& variant) {
  FastAttentionConfig config;
  config.dim_heads = kDim;
  config.nb_features = kFeatures;
  config.causal = variant.causal;
  config.generalized_attention = variant.generalized;
  config.kernel_fn = variant.kernel_fn;
  config.no_projection = variant.no_projection;
  torch::manual_seed(3);
  FastAttention attention(config);
  attention->RedrawProjectionMatrix();
  return attention;
}

struct Inputs {
  torch::Tensor q, k, v;
};

Inputs MakeInputs(int64_t length = kLength) {
  torch::manual_seed(11);
  return {torch::randn({kBatch, kHeads, length, kDim}, torch::kDouble),
          torch::randn({kBatch, kHeads, length, kDim}, torch::kDouble),
          torch::randn({kBatch, kHeads, length, kDim}, torch::kDouble)};
}

// The definition of the reference's attention from its feature maps, with
// the L x L matrix A = q' k'^T:
//   causal:     out = tril(A) v / (tril(A) 1 + 1e-6 sum_f q')
//   non-causal: out = A v / (A 1)
torch::Tensor QuadraticReference(const FastAttention& attention, const Variant& variant,
                                 const Inputs& in) {
  torch::Tensor qf = attention->QueryFeatures(in.q);
  torch::Tensor kf = attention->KeyFeatures(in.k);
  torch::Tensor a = torch::matmul(qf, kf.transpose(-1, -2));
  if (!variant.causal) return torch::matmul(a, in.v) / a.sum(-1, true);
  a = a.tril();
  return torch::matmul(a, in.v) / (a.sum(-1, true) + kCausalDenominatorEps * qf.sum(-1, true));
}

void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double scale = expected.abs().max().item<double>();
  EXPECT_LE((actual - expected).abs().max().item<double>(), tolerance * scale) << what;
}

TEST(FastAttentionTest, InferenceForwardEqualsTheQuadraticDefinition) {
  torch::NoGradGuard no_grad;
  const Inputs in = MakeInputs();
  for (const Variant& variant : Variants()) {
    FastAttention attention = MakeAttention(variant);
    attention->to(torch::kDouble);
    ExpectClose(attention(in.q, in.k, in.v), QuadraticReference(attention, variant, in), 1e-10,
                variant.name);
  }
}

TEST(FastAttentionTest, TrainingForwardEqualsInferenceAndHasGradients) {
  for (const Variant& variant : Variants()) {
    FastAttention attention = MakeAttention(variant);
    attention->to(torch::kDouble);
    Inputs in = MakeInputs();
    torch::Tensor inference;
    {
      torch::NoGradGuard no_grad;
      inference = attention(in.q, in.k, in.v);
    }
    for (torch::Tensor* t : {&in.q, &in.k, &in.v}) t->requires_grad_(true);
    torch::Tensor training = attention(in.q, in.k, in.v);
    ExpectClose(training.detach(), inference, 1e-10, variant.name);
    training.pow(2).sum().backward();
    for (const torch::Tensor* t : {&in.q, &in.k, &in.v}) {
      ASSERT_TRUE(t->grad().defined()) << variant.name;
      EXPECT_TRUE(torch::isfinite(t->grad()).all().item<bool>()) << variant.name;
      EXPECT_GT(t->grad().abs().sum().item<double>(), 0.0) << variant.name;
    }
  }
}

TEST(FastAttentionTest, WithoutGradientsTheFeatureMapsAreTheFusedKernels) {
  const Inputs in = MakeInputs();
  FastAttention softmax = MakeAttention(Variants()[0]);
  FastAttention relu = MakeAttention(Variants()[1]);
  softmax->to(torch::kDouble);
  relu->to(torch::kDouble);
  const torch::Tensor& p = softmax->projection_matrix();
  {
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::equal(softmax->QueryFeatures(in.q),
                             kernels::SoftmaxKernelFeatures(in.q, p, true, kSoftmaxKernelEps)));
    EXPECT_TRUE(torch::equal(softmax->KeyFeatures(in.k),
                             kernels::SoftmaxKernelFeatures(in.k, p, false, kSoftmaxKernelEps)));
    EXPECT_TRUE(torch::equal(relu->QueryFeatures(in.q),
                             kernels::GeneralizedKernelFeatures(in.q, relu->projection_matrix(),
                                                                kGeneralizedKernelEps)));
  }
  // With gradients to record: the differentiable tensor ops, equal to the
  // fused kernel up to rounding.
  torch::Tensor q = in.q.clone().requires_grad_(true);
  torch::Tensor features = softmax->QueryFeatures(q);
  EXPECT_TRUE(features.requires_grad());
  EXPECT_TRUE(torch::equal(features.detach(), SoftmaxKernelQuery(in.q, p)));
  ExpectClose(features.detach(), kernels::SoftmaxKernelFeatures(in.q, p, true, kSoftmaxKernelEps),
              1e-12, "softmax query features");
}

std::vector<torch::Tensor> EmptyState(const FastAttention& attention) {
  const int64_t m = attention->feature_dim();
  std::vector<torch::Tensor> state(3);
  state[kStateKv] = torch::zeros({kBatch, kHeads, m, kDim + 1}, torch::kDouble);
  state[kStateKeyMax] = torch::zeros({kBatch, kHeads}, torch::kDouble);
  state[kStateValueSum] = torch::zeros({kBatch, kHeads, kDim + 1}, torch::kDouble);
  return state;
}

TEST(FastAttentionTest, CausalForwardCapturesTheDecodeState) {
  torch::NoGradGuard no_grad;
  const Inputs in = MakeInputs();
  const torch::Tensor v1 =
      torch::cat({in.v, torch::ones({kBatch, kHeads, kLength, 1}, torch::kDouble)}, -1);
  for (const Variant& variant : Variants()) {
    if (!variant.causal) continue;
    FastAttention attention = MakeAttention(variant);
    attention->to(torch::kDouble);
    std::vector<torch::Tensor> state = EmptyState(attention);
    torch::Tensor out = attention(in.q, in.k, in.v, state);
    ExpectClose(out, attention(in.q, in.k, in.v), 1e-12, variant.name + " output");
    if (attention->feature_kind() == FeatureKind::kSoftmax) {
      // kv in the frame of the key stabiliser, without the ratio and 1e-4.
      SoftmaxKeyExponents keys = ComputeSoftmaxKeyExponents(in.k, attention->projection_matrix());
      ExpectClose(state[kStateKv], torch::matmul(keys.exponents.transpose(-1, -2), v1), 1e-12,
                  variant.name + " kv");
      EXPECT_TRUE(torch::equal(state[kStateKeyMax], keys.stabiliser)) << variant.name;
      ExpectClose(state[kStateValueSum], v1.sum(-2), 1e-12, variant.name + " v_sum");
    } else {
      ExpectClose(state[kStateKv],
                  torch::matmul(attention->KeyFeatures(in.k).transpose(-1, -2), v1), 1e-12,
                  variant.name + " kv");
    }
  }
}

TEST(FastAttentionTest, TheCapturedStateContinuesLikeTheFullForward) {
  // When the next key does not raise the stabiliser, a step from the
  // captured state is exactly the last row of the full forward.
  torch::NoGradGuard no_grad;
  const Variant variant = Variants()[0];
  FastAttention attention = MakeAttention(variant);
  attention->to(torch::kDouble);
  Inputs in = MakeInputs(kLength + 1);
  // The last key is the first key scaled down: its projections stay below
  // the maximum of the prompt's.
  in.k.select(2, kLength).copy_(in.k.select(2, 0) * 0.5);
  std::vector<torch::Tensor> state = EmptyState(attention);
  attention(in.q.narrow(2, 0, kLength), in.k.narrow(2, 0, kLength), in.v.narrow(2, 0, kLength),
            state);
  attention->PrepareForDecoding();
  torch::Tensor qk = torch::cat({in.q.select(2, kLength), in.k.select(2, kLength)}, 1);
  torch::Tensor step = attention->Step(qk, in.v.select(2, kLength), state);
  ExpectClose(step, attention(in.q, in.k, in.v).select(2, kLength), 1e-10, "step");
}

TEST(FastAttentionTest, ExtendContinuesTheStateLikeTheFullForward) {
  // Prompt, then two chunks: each chunk's outputs are the full forward's
  // over everything so far (the stabiliser of a chunk is the maximum so
  // far, which is the full forward's), and the state after them is the one
  // a forward over everything captures.
  torch::NoGradGuard no_grad;
  const int64_t prompt = 9, first = 12, second = kLength - prompt - first;
  const Inputs in = MakeInputs();
  for (const Variant& variant : Variants()) {
    if (!variant.causal) continue;
    FastAttention attention = MakeAttention(variant);
    attention->to(torch::kDouble);
    std::vector<torch::Tensor> state = EmptyState(attention);
    attention(in.q.narrow(2, 0, prompt), in.k.narrow(2, 0, prompt), in.v.narrow(2, 0, prompt),
              state);
    int64_t done = prompt;
    for (int64_t chunk : {first, second}) {
      torch::Tensor out =
          attention->Extend(in.q.narrow(2, done, chunk), in.k.narrow(2, done, chunk),
                            in.v.narrow(2, done, chunk), state);
      done += chunk;
      torch::Tensor full =
          attention(in.q.narrow(2, 0, done), in.k.narrow(2, 0, done), in.v.narrow(2, 0, done));
      ExpectClose(out, full.narrow(2, done - chunk, chunk), 1e-10,
                  variant.name + " chunk ending at " + std::to_string(done));
    }
    std::vector<torch::Tensor> whole = EmptyState(attention);
    attention(in.q, in.k, in.v, whole);
    ExpectClose(state[kStateKv], whole[kStateKv], 1e-10, variant.name + " kv");
    if (attention->feature_kind() == FeatureKind::kSoftmax) {
      EXPECT_TRUE(torch::equal(state[kStateKeyMax], whole[kStateKeyMax])) << variant.name;
      ExpectClose(state[kStateValueSum], whole[kStateValueSum], 1e-12, variant.name + " v_sum");
    }
  }
}

TEST(FastAttentionTest, CaptureNeedsInferenceAndCausality) {
  const Inputs in = MakeInputs();
  FastAttention causal = MakeAttention(Variants()[0]);
  causal->to(torch::kDouble);
  std::vector<torch::Tensor> state = EmptyState(causal);
  torch::Tensor q = in.q.clone().requires_grad_(true);
  EXPECT_THROW(causal(q, in.k, in.v, state), c10::Error);
  torch::NoGradGuard no_grad;
  FastAttention non_causal = MakeAttention(Variants()[4]);
  non_causal->to(torch::kDouble);
  EXPECT_THROW(non_causal(in.q, in.k, in.v, state), c10::Error);
}

// On a GPU the same layer runs the CUDA kernels (fused feature maps, the
// chunkwise prefill, non-causal linear attention) in float32: its outputs
// and captured state equal the CPU's in float64.
TEST(FastAttentionCudaTest, InferenceOnTheGpuEqualsTheCpu) {
  PERFORMER_REQUIRE_CUDA();
  torch::NoGradGuard no_grad;
  const Inputs in = MakeInputs();
  const torch::Device gpu(torch::kCUDA);
  for (const Variant& variant : Variants()) {
    FastAttention attention = MakeAttention(variant);
    attention->to(torch::kDouble);
    std::vector<torch::Tensor> cpu_state = EmptyState(attention);
    torch::Tensor expected = attention(
        in.q, in.k, in.v, variant.causal ? torch::TensorList(cpu_state) : torch::TensorList());
    attention->to(gpu, torch::kFloat);
    std::vector<torch::Tensor> gpu_state = EmptyState(attention);
    for (torch::Tensor* t :
         {&gpu_state[kStateKv], &gpu_state[kStateKeyMax], &gpu_state[kStateValueSum]}) {
      *t = t->to(gpu, torch::kFloat);
    }
    torch::Tensor actual = attention(
        in.q.to(gpu, torch::kFloat), in.k.to(gpu, torch::kFloat), in.v.to(gpu, torch::kFloat),
        variant.causal ? torch::TensorList(gpu_state) : torch::TensorList());
    ExpectClose(actual.cpu().to(torch::kDouble), expected, 1e-4, variant.name);
    if (variant.causal) {
      ExpectClose(gpu_state[kStateKv].cpu().to(torch::kDouble), cpu_state[kStateKv], 1e-4,
                  variant.name + " kv");
    }
  }
}

}  // namespace
}  // namespace performer::models
