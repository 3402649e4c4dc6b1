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
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <limits>

#include "bench/memory_tracker.h"
#include "core/attention/attention_registries.h"
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
