// Full vs linear vs causal-linear attention as the sequence grows:
// N=1, H=8, E=M=64, L = 256 ... 16384, CPU, float32, eval mode.
//
// Full attention materialises the (N,H,L,L) score matrix: O(L^2) time and
// memory. Linear and causal-linear attention (elu feature map) are O(L).
// Full attention is skipped above L=8192, where its score matrix and softmax
// output alone would need 2 x 8.6 GB.
//
// Cached full attention (fast-transformers' recurrent full attention in its
// slot form, what a server decodes with): a prompt of L tokens (n = L) and
// one step after L cached tokens (n = 1), through the row-invariant kernel
// (kernels::CausalSoftmaxAttention) and through the tensor ops it replaces
// on the CPU (scores by einsum, masked softmax, einsum).
//
// Windowed ring attention (performer-pytorch's local heads in their
// recurrent form) at window 64: a prompt of L tokens of one sequence, and
// one step of a batch of 32 sequences past their first 2w tokens, through
// kernels::WindowedRingAttention and through the tensor ops of the module's
// fallback.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <limits>

#include "bench/memory_tracker.h"
#include "core/attention/attention_registries.h"
#include "core/attention/windowed_local_attention.h"
#include "core/masks.h"
#include "core/runtime/torch_runtime.h"
#include "kernels/causal_softmax_attention.h"

namespace performer {
namespace {

constexpr int64_t kHeads = 8;
constexpr int64_t kDims = 64;
constexpr int64_t kMaxFullLength = 8192;

void RunAttention(benchmark::State& state, const std::string& type, bool causal) {
  const int64_t length = state.range(0);
  if (type == "full" && length > kMaxFullLength) {
    state.SkipWithError("full attention skipped above L=8192 (score matrix > 8 GB)");
    return;
  }
  torch::NoGradGuard no_grad;
  ParamMap params;
  if (type != "full") params["query_dimensions"] = ParamValue(kDims);
  absl::StatusOr<AttentionPtr> attention = GlobalAttentionRegistry().Create(type, {}, params);
  if (!attention.ok()) {
    state.SkipWithError(std::string(attention.status().message()).c_str());
    return;
  }
  (*attention)->eval();
  torch::manual_seed(0);
  torch::Tensor q = torch::randn({1, length, kHeads, kDims});
  torch::Tensor k = torch::randn({1, length, kHeads, kDims});
  torch::Tensor v = torch::randn({1, length, kHeads, kDims});
  Mask attn_mask = causal ? Mask::TriangularCausal(length) : Mask::Full(length, length);
  Mask lengths = Mask::Lengths(torch::full({1}, length, torch::kLong), length);
  int64_t peak = 0;
  for (auto _ : state) {
    bench::PeakMemoryScope memory;
    torch::Tensor out = (*attention)->forward(q, k, v, attn_mask, lengths, lengths);
    benchmark::DoNotOptimize(out.data_ptr());
    peak = std::max(peak, memory.PeakAboveStart());
  }
  state.counters["L"] = static_cast<double>(length);
  // Extra CPU tensor memory of one forward call, output included.
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(length), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_FullAttention(benchmark::State& state) { RunAttention(state, "full", false); }
void BM_LinearAttention(benchmark::State& state) { RunAttention(state, "linear", false); }
void BM_CausalLinearAttention(benchmark::State& state) {
  RunAttention(state, "causal-linear", true);
}

// queries [1, n, H, E] at positions L - n .. L - 1 over L cached keys.
void RunCachedFullAttention(benchmark::State& state, bool kernel) {
  const int64_t length = state.range(0), n = state.range(1) == 0 ? length : 1;
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const torch::Tensor q = torch::randn({1, n, kHeads, kDims});
  const torch::Tensor k = torch::randn({1, length, kHeads, kDims});
  const torch::Tensor v = torch::randn({1, length, kHeads, kDims});
  const torch::Tensor last = torch::arange(length - n, length, torch::kLong).unsqueeze(0);
  const double temp = 1.0 / 8.0;
  for (auto _ : state) {
    torch::Tensor out;
    if (kernel) {
      out = kernels::CausalSoftmaxAttention(q, k, v, last, temp);
    } else {
      torch::Tensor scores = torch::einsum("nlhe,nthe->nhlt", {q, k}) * temp;
      const torch::Tensor t = torch::arange(length, torch::kLong).view({1, 1, length});
      scores.masked_fill_((t > last.unsqueeze(-1)).unsqueeze(1),
                          -std::numeric_limits<float>::infinity());
      out = torch::einsum("nhlt,nthd->nlhd", {torch::softmax(scores, -1), v});
    }
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.counters["L"] = static_cast<double>(length);
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_CachedFullAttentionKernel(benchmark::State& state) { RunCachedFullAttention(state, true); }
void BM_CachedFullAttentionTensorOps(benchmark::State& state) {
  RunCachedFullAttention(state, false);
}

// Local attention's recurrent form through the module (Extend for a
// prompt, Step for a batch), by the ring kernel or, with rings that are not
// contiguous, by the tensor ops that stand in where the kernel does not run.
void RunWindowedRingAttention(benchmark::State& state, bool kernel) {
  constexpr int64_t kWindow = 64, kStepBatch = 32, kStepPosition = 1000;
  const bool step = state.range(1) != 0;
  const int64_t sequences = step ? kStepBatch : 1, tokens = step ? 1 : state.range(0);
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  WindowedLocalAttention attention(kDims, kWindow, /*causal=*/true);
  attention->eval();
  attention->PrepareForDecoding();
  const torch::Tensor q = torch::randn({sequences, kHeads, tokens, kDims});
  const torch::Tensor k = torch::randn({sequences, kHeads, tokens, kDims});
  const torch::Tensor v = torch::randn({sequences, kHeads, tokens, kDims});
  // [C, H, 2w, d], contiguous or a transposed view.
  auto ring = [&] {
    const torch::Tensor r = torch::randn({sequences, kHeads, kDims, 2 * kWindow});
    return kernel ? r.transpose(2, 3).contiguous() : r.transpose(2, 3);
  };
  const torch::Tensor ring_k = ring(), ring_v = ring();
  const torch::Tensor positions = torch::full({sequences}, kStepPosition, torch::kLong);
  for (auto _ : state) {
    const torch::Tensor out =
        step ? attention->Step(q.squeeze(2), k.squeeze(2), v.squeeze(2), positions, ring_k, ring_v)
             : attention->Extend(q, k, v, 0, ring_k, ring_v);
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(sequences * tokens), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_WindowedRingAttentionKernel(benchmark::State& state) {
  RunWindowedRingAttention(state, true);
}
void BM_WindowedRingAttentionTensorOps(benchmark::State& state) {
  RunWindowedRingAttention(state, false);
}

// {L, 0}: a prompt of L tokens; {1, 1}: one step of 32 sequences.
#define PERFORMER_RING_SHAPES   \
  Args({1024, 0})               \
      ->Args({4096, 0})         \
      ->Args({1, 1})            \
      ->ArgNames({"L", "step"}) \
      ->Unit(benchmark::kMillisecond)
BENCHMARK(BM_WindowedRingAttentionKernel)->PERFORMER_RING_SHAPES;
BENCHMARK(BM_WindowedRingAttentionTensorOps)->PERFORMER_RING_SHAPES;

// {L, 0}: a prompt of L tokens; {L, 1}: one step after L.
#define PERFORMER_CACHED_SHAPES \
  ArgsProduct({{256, 1024, 4096}, {0, 1}})->ArgNames({"L", "step"})->Unit(benchmark::kMillisecond)
BENCHMARK(BM_CachedFullAttentionKernel)->PERFORMER_CACHED_SHAPES;
BENCHMARK(BM_CachedFullAttentionTensorOps)->PERFORMER_CACHED_SHAPES;

#define PERFORMER_LENGTHS RangeMultiplier(4)->Range(256, 16384)->Unit(benchmark::kMillisecond)
BENCHMARK(BM_FullAttention)->PERFORMER_LENGTHS->Iterations(3);
BENCHMARK(BM_LinearAttention)->PERFORMER_LENGTHS->Iterations(3);
BENCHMARK(BM_CausalLinearAttention)->PERFORMER_LENGTHS->Iterations(3);

}  // namespace
}  // namespace performer

int main(int argc, char** argv) {
  performer::bench::CpuMemoryTracker::Install();
  performer::TorchRuntimeInfo info = performer::ConfigureTorchRuntime(0);
  std::printf("%s\n", performer::DescribeTorchRuntime(info).c_str());
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
