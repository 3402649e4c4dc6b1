// Causal dot product (causal linear attention's kernel): the CPU kernel
// against the plain LibTorch formulation, forward pass, in the same run.
//
//   kernel: performer::kernels::CausalDotProduct, a running E x M state
//   plain (cumsum): cumsum over L of the L x E x M outer products k_l v_l^T,
//           contracted with q (fast-transformers' pure-PyTorch fallback)
//   plain (masked): (Q K^T masked to the lower triangle) V, L x L scores
// A plain formulation is skipped where it would need more than 8 GiB.
//
// N = 1, H = 8, E = M = 64, L in {256, 1024, 4096, 16384, 32768}, float32,
// inference (no autograd graph). Counters: peak CPU tensor memory of one
// call (bench/memory_tracker.h) and the output's size; the kernel's peak must
// stay at the output plus one E x M state per thread for every L. After the
// runs a table of plain / kernel ratios is printed (with
// --benchmark_repetitions, from the fastest repetition of each).
//
// Threads: $PERFORMER_BENCH_THREADS (default 2).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench/memory_tracker.h"
#include "kernels/causal_product.h"

namespace performer::bench {
namespace {

constexpr int64_t kN = 1, kH = 8, kE = 64, kM = 64;
constexpr double kPlainLimitBytes = 8.0 * (1LL << 30);
constexpr double kMiB = 1024.0 * 1024.0;

torch::Tensor PlainCausalProduct(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v) {
  torch::Tensor kv = torch::einsum("nhle,nhlm->nhlem", {k, v}).cumsum(2);
  return torch::einsum("nhle,nhlem->nhlm", {q, kv});
}

torch::Tensor MaskedCausalProduct(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v) {
  const int64_t L = q.size(2);
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1));
  scores.mul_(torch::ones({L, L}).tril_());
  return torch::matmul(scores, v);
}

// The cumsum formulation holds the outer products, their prefix sums and the
// output.
double CumsumBytesNeeded(int64_t L) { return (2.0 * kE + 1.0) * kN * kH * L * kM * sizeof(float); }
// The masked one holds the scores and the mask.
double MaskedBytesNeeded(int64_t L) { return (kN * kH + 1.0) * L * L * sizeof(float); }

// Skips the benchmark (and says why) when the formulation needs too much.
bool SkipIfTooLarge(benchmark::State& state, double needed) {
  if (needed <= kPlainLimitBytes) return false;
  const std::string reason =
      "skipped: needs " + std::to_string(needed / (1 << 30)) + " GiB (> 8 GiB)";
  state.SkipWithError(reason.c_str());
  for (auto _ : state) {
  }
  return true;
}

struct Inputs {
  torch::Tensor q, k, v;
};

Inputs MakeInputs(int64_t L) {
  torch::manual_seed(0);
  // Small magnitudes keep the unnormalised sums finite for long sequences.
  return {torch::randn({kN, kH, L, kE}) * 0.1, torch::randn({kN, kH, L, kE}) * 0.1,
          torch::randn({kN, kH, L, kM})};
}

template <typename Fn>
void RunForward(benchmark::State& state, Fn fn) {
  const int64_t L = state.range(0);
  torch::NoGradGuard no_grad;
  const Inputs in = MakeInputs(L);
  int64_t peak = 0;
  {
    PeakMemoryScope scope;
    torch::Tensor out = fn(in.q, in.k, in.v);
    peak = scope.PeakAboveStart();
  }
  for (auto _ : state) {
    torch::Tensor out = fn(in.q, in.k, in.v);
    benchmark::DoNotOptimize(out.data_ptr<float>());
  }
  state.counters["peak_MiB"] = static_cast<double>(peak) / kMiB;
  state.counters["output_MiB"] = static_cast<double>(kN * kH * L * kM * sizeof(float)) / kMiB;
  state.counters["L"] = static_cast<double>(L);
}

void BM_CausalProductKernel(benchmark::State& state) {
  RunForward(state, [](const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    return kernels::CausalDotProduct(q, k, v);
  });
}

void BM_CausalProductPlainCumsum(benchmark::State& state) {
  if (SkipIfTooLarge(state, CumsumBytesNeeded(state.range(0)))) return;
  RunForward(state, PlainCausalProduct);
}

void BM_CausalProductPlainMasked(benchmark::State& state) {
  if (SkipIfTooLarge(state, MaskedBytesNeeded(state.range(0)))) return;
  RunForward(state, MaskedCausalProduct);
}

void Lengths(benchmark::internal::Benchmark* b) {
  for (int64_t L : {256, 1024, 4096, 16384, 32768}) b->Arg(L);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_CausalProductKernel)->Apply(Lengths);
BENCHMARK(BM_CausalProductPlainCumsum)->Apply(Lengths);
BENCHMARK(BM_CausalProductPlainMasked)->Apply(Lengths);

// Console output as usual, plus the per-L results kept for the ratio table.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  struct Result {
    double ms = 0;
    double peak_mib = 0;
    double output_mib = 0;
  };

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      auto L = run.counters.find("L");
      // Skipped runs have no counters; with --benchmark_repetitions the
      // fastest repetition is kept (the least disturbed by other processes).
      if (L == run.counters.end() || run.run_type != Run::RT_Iteration) continue;
      Result& r = results_[run.run_name.function_name][static_cast<int64_t>(L->second.value)];
      const double ms = run.GetAdjustedRealTime();
      if (r.ms == 0 || ms < r.ms) r.ms = ms;
      r.peak_mib = run.counters.at("peak_MiB").value;
      r.output_mib = run.counters.at("output_MiB").value;
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintRatios() const {
    const auto kernel = results_.find("BM_CausalProductKernel");
    if (kernel == results_.end()) return;
    auto find = [&](const char* name, int64_t L) -> const Result* {
      auto family = results_.find(name);
      if (family == results_.end()) return nullptr;
      auto it = family->second.find(L);
      return it == family->second.end() ? nullptr : &it->second;
    };
    std::printf(
        "\n| L | kernel ms | cumsum ms (x kernel) | masked ms (x kernel) | kernel peak MiB | "
        "cumsum peak MiB (x kernel) | masked peak MiB (x kernel) | output MiB |\n"
        "|---|---|---|---|---|---|---|---|\n");
    for (const auto& [L, k] : kernel->second) {
      std::printf("| %lld | %.2f |", static_cast<long long>(L), k.ms);
      const Result* plains[] = {find("BM_CausalProductPlainCumsum", L),
                                find("BM_CausalProductPlainMasked", L)};
      for (const Result* p : plains) {
        if (p == nullptr) {
          std::printf(" skipped (> 8 GiB) |");
        } else {
          std::printf(" %.2f (%.1fx) |", p->ms, p->ms / k.ms);
        }
      }
      std::printf(" %.2f |", k.peak_mib);
      for (const Result* p : plains) {
        if (p == nullptr) {
          std::printf(" - |");
        } else {
          std::printf(" %.1f (%.0fx) |", p->peak_mib, p->peak_mib / k.peak_mib);
        }
      }
      std::printf(" %.2f |\n", k.output_mib);
    }
  }

 private:
  std::map<std::string, std::map<int64_t, Result>> results_;
};

}  // namespace
}  // namespace performer::bench

int main(int argc, char** argv) {
  // Before any tensor exists, so that every benchmark tensor is counted.
  performer::bench::CpuMemoryTracker::Install();
  const char* threads = std::getenv("PERFORMER_BENCH_THREADS");
  torch::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("torch threads: %d\n", torch::get_num_threads());
  performer::bench::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
