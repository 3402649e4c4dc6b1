// Causal FAVOR+ prefill of one attention layer, with the decode state the
// decoder continues from, on the bench model's layer shape (heads 8,
// dim_head 64, nb_features 256), CPU, float32, inference:
//
//   fused:    FastAttention::forward with a state capture: the query map
//             fused with its projection (kernels/favor_features.h), then one
//             kernels::CausalLinearPrefill over [v, 1] that yields the
//             numerator, the normaliser and the final state together;
//   separate: the same result from the tensor-op feature maps, the causal
//             dot product for the numerator, a cumsum of the key features
//             for the normaliser and a second pass over the keys for the
//             state (the formulation before the prefill kernel was used).
// Both compute the same outputs and state (the table gives their largest
// difference) and the separate / fused time ratio, median of several runs.
//
// Then the whole bench model (bench/bench_model.h): a prompt prefilled in
// chunks of 512 tokens as the server does (--prefill_chunk_tokens), the
// first chunk by Prefill and the rest by Extend (one chunkwise prefill per
// layer from the state), against the same rest fed by single-token Steps
// (what Extend did before), with all 8 heads global and with 2 of them
// local (window 64, like the default model). The Steps use each token's
// running stabiliser, the chunks one per chunk: the table gives the largest
// logit difference.
//
// Threads: $PERFORMER_BENCH_THREADS (default 2).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_model.h"
#include "core/decoding/performer_decoder.h"
#include "core/feature_maps/performer_kernels.h"
#include "core/models/fast_attention.h"
#include "kernels/causal_linear_prefill.h"
#include "kernels/causal_product.h"

namespace performer::bench {
namespace {

constexpr int64_t kHeads = 8, kDimHead = 64, kFeatures = 256;

struct Inputs {
  models::FastAttention attention{nullptr};
  torch::Tensor q, k, v;
  std::vector<torch::Tensor> state;
};

std::vector<torch::Tensor> MakeState() {
  std::vector<torch::Tensor> state(3);
  state[models::kStateKv] = torch::zeros({1, kHeads, kFeatures, kDimHead + 1});
  state[models::kStateKeyMax] = torch::zeros({1, kHeads});
  state[models::kStateValueSum] = torch::zeros({1, kHeads, kDimHead + 1});
  return state;
}

Inputs MakeInputs(int64_t length) {
  torch::manual_seed(0);
  models::FastAttentionConfig config;
  config.dim_heads = kDimHead;
  config.nb_features = kFeatures;
  config.causal = true;
  Inputs in;
  in.attention = models::FastAttention(config);
  in.attention->RedrawProjectionMatrix();
  in.attention->eval();
  in.q = torch::randn({1, kHeads, length, kDimHead});
  in.k = torch::randn({1, kHeads, length, kDimHead});
  in.v = torch::randn({1, kHeads, length, kDimHead});
  in.state = MakeState();
  return in;
}

torch::Tensor Separate(const Inputs& in, std::vector<torch::Tensor>& state) {
  const torch::Tensor& p = in.attention->projection_matrix();
  torch::Tensor qf = SoftmaxKernelQuery(in.q, p);
  torch::Tensor kf = SoftmaxKernelKey(in.k, p);
  torch::Tensor out = kernels::CausalDotProduct(qf, kf, in.v) /
                      (qf * (kf.cumsum(-2) + models::kCausalDenominatorEps)).sum(-1, true);
  // The state, from a second pass over the keys.
  SoftmaxKeyExponents keys = ComputeSoftmaxKeyExponents(in.k, p);
  torch::Tensor v1 = torch::cat({in.v, torch::ones_like(in.v.narrow(-1, 0, 1))}, -1);
  state[models::kStateKv].copy_(torch::matmul(keys.exponents.transpose(-1, -2), v1));
  state[models::kStateValueSum].copy_(v1.sum(-2));
  state[models::kStateKeyMax].copy_(keys.stabiliser);
  return out;
}

// The prefill formulation with tensor-op feature maps (differentiable).
torch::Tensor Chunked(const Inputs& in) {
  const torch::Tensor& p = in.attention->projection_matrix();
  torch::Tensor qf = SoftmaxKernelQuery(in.q, p);
  torch::Tensor kf = SoftmaxKernelKey(in.k, p);
  torch::Tensor v1 = torch::cat({in.v, torch::ones_like(in.v.narrow(-1, 0, 1))}, -1);
  torch::Tensor out = kernels::CausalLinearPrefill(qf, kf, v1).out;
  return out.narrow(-1, 0, kDimHead) /
         (out.narrow(-1, kDimHead, 1) + models::kCausalDenominatorEps * qf.sum(-1, true));
}

// Median wall seconds of `runs` calls after one warm-up call.
template <typename Fn>
double MedianSeconds(int runs, Fn fn) {
  fn();
  std::vector<double> seconds;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

constexpr int64_t kChunk = 512;

struct ChunkedPrefill {
  double seconds = 0;
  torch::Tensor logits;  // of the last prompt token
};

// A `length`-token prompt of the bench model: the first chunk by Prefill,
// the rest by Extend per chunk (extend) or by one Step per token.
// local_heads > 0: that many heads of each layer are local (window 64, as
// in the default model).
ChunkedPrefill PrefillInChunks(int64_t length, bool extend, int64_t local_heads) {
  torch::manual_seed(5);
  const std::vector<int64_t> prompt = RandomTokens(length, 256);
  models::PerformerLMConfig config = BenchConfig(length + 16);
  config.local_attn_heads = {local_heads};
  config.local_window_size = 64;
  auto decoder = *decoding::PerformerDecoder::Create(BenchModel(config), 1);
  const decoding::SequenceId id = *decoder->Create();
  const auto start = std::chrono::steady_clock::now();
  ChunkedPrefill result;
  result.logits = *decoder->Prefill(id, {{prompt.begin(), prompt.begin() + kChunk}, {}, {}});
  for (int64_t done = kChunk; done < length; done += kChunk) {
    if (extend) {
      result.logits = *decoder->Extend(id, {prompt.begin() + done, prompt.begin() + done + kChunk});
    } else {
      for (int64_t t = done; t < done + kChunk; ++t) {
        result.logits = (*decoder->Step({id}, {prompt[static_cast<size_t>(t)]}))[0];
      }
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace
}  // namespace performer::bench

int main() {
  using performer::bench::Inputs;
  const char* threads = std::getenv("PERFORMER_BENCH_THREADS");
  torch::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  torch::NoGradGuard no_grad;
  std::printf("torch %s, %d threads; heads %lld, dim_head %lld, nb_features %lld, float32\n\n",
              TORCH_VERSION, torch::get_num_threads(),
              static_cast<long long>(performer::bench::kHeads),
              static_cast<long long>(performer::bench::kDimHead),
              static_cast<long long>(performer::bench::kFeatures));
  std::printf(
      "| L | fused ms | separate ms | separate / fused | output max abs difference | state max "
      "relative difference |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int64_t length : {256, 1024, 4096, 16384}) {
    Inputs in = performer::bench::MakeInputs(length);
    const int runs = length >= 16384 ? 5 : 11;
    torch::Tensor fused_out, separate_out;
    std::vector<torch::Tensor> separate_state = performer::bench::MakeState();
    const double fused = performer::bench::MedianSeconds(
        runs, [&] { fused_out = in.attention->forward(in.q, in.k, in.v, in.state); });
    const double separate = performer::bench::MedianSeconds(
        runs, [&] { separate_out = performer::bench::Separate(in, separate_state); });
    const double state_difference =
        ((in.state[performer::models::kStateKv] - separate_state[performer::models::kStateKv])
             .abs()
             .max() /
         separate_state[performer::models::kStateKv].abs().max())
            .item<double>();
    std::printf("| %lld | %.2f | %.2f | %.2fx | %.1e | %.1e |\n", static_cast<long long>(length),
                fused * 1e3, separate * 1e3, separate / fused,
                (fused_out - separate_out).abs().max().item<double>(), state_difference);
  }
  // Training: forward and backward with gradients for q, k and v, the
  // chunkwise prefill's autograd (kernels::CausalLinearPrefill on the CPU,
  // called directly) against the causal dot product's own backward (what
  // FastAttention runs when gradients are recorded; tensor-op feature maps
  // in both; the causal dot product side also computes the state).
  {
    torch::AutoGradMode grad(true);
    std::printf(
        "\nforward + backward (training)\n\n| L | chunkwise prefill ms | causal dot product ms | "
        "prefill / causal dot product |\n|---|---|---|---|\n");
    for (int64_t length : {256, 1024, 4096}) {
      Inputs in = performer::bench::MakeInputs(length);
      for (torch::Tensor* t : {&in.q, &in.k, &in.v}) t->requires_grad_(true);
      const double fused = performer::bench::MedianSeconds(
          5, [&] { performer::bench::Chunked(in).sum().backward(); });
      const double separate = performer::bench::MedianSeconds(5, [&] {
        std::vector<torch::Tensor> state = performer::bench::MakeState();
        performer::bench::Separate(in, state).sum().backward();
      });
      std::printf("| %lld | %.2f | %.2f | %.2fx |\n", static_cast<long long>(length), fused * 1e3,
                  separate * 1e3, fused / separate);
    }
  }
  std::printf(
      "\nbench model, chunked prompt prefill (chunks of %lld)\n\n| local heads per layer | prompt "
      "tokens | Prefill + Extend s | Prefill + Steps s | Steps / Extend | max logit difference "
      "|\n|---|---|---|---|---|---|\n",
      static_cast<long long>(performer::bench::kChunk));
  for (int64_t local_heads : {0, 2}) {
    for (int64_t length : {1024, 4096}) {
      const performer::bench::ChunkedPrefill extend =
          performer::bench::PrefillInChunks(length, true, local_heads);
      const performer::bench::ChunkedPrefill steps =
          performer::bench::PrefillInChunks(length, false, local_heads);
      std::printf("| %lld | %lld | %.2f | %.2f | %.1fx | %.1e |\n",
                  static_cast<long long>(local_heads), static_cast<long long>(length),
                  extend.seconds, steps.seconds, steps.seconds / extend.seconds,
                  (extend.logits - steps.logits).abs().max().item<double>());
    }
  }
  return 0;
}
