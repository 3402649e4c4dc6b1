// The decode step's projections with fp32, bf16 and int8 weights, in the same
// run: kernels::SkinnyLinear (fp32) against kernels/cpu/weight_dtype_linear_cpu.h
// (LinearBf16, LinearInt8) on each SIMD path this CPU has, for a 512 -> 2048
// and a 2048 -> 512 layer (in -> out) at 1, 8 and 32 rows; and at 256 rows (a
// prompt's chunk) fp32 through sgemm, the fastest streamed path of each
// compact format, and each compact format widened to float32 then sgemm
// (*_widened: the alternative to streaming a prompt's rows).
//
// A decode step reads every layer's weights once, so a layer's weights are
// not in the core's caches when its turn comes. To time that, each benchmark
// cycles through copies of its layer: as many as make
// $PERFORMER_BENCH_WEIGHT_MIB (default 64) MiB of fp32 weights, the size of a
// small model, and the same number of copies in every format (so int8 may
// fit in a cache level that fp32 does not, as it would in the model).
// 0 keeps one copy (weights hot in cache).
//
// Counters: weight_GB/s, the weight bytes read per second (fp32 4 bytes a
// weight, bf16 2, int8 1 plus a 4-byte scale per 32). After the runs a table
// gives each format's time and its speed-up over fp32 (with
// --benchmark_repetitions, from the fastest repetition of each, or the median
// with --benchmark_report_aggregates_only).
//
// Threads: $PERFORMER_BENCH_THREADS (default 2).
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/weight_dtype_linear_cpu.h"
#include "kernels/cpu/weight_formats.h"
#include "kernels/skinny_linear.h"

namespace performer::bench {
namespace {

using kernels::cpu::LinearPath;
using kernels::cpu::LinearWeights;

struct Layer {
  int64_t in, out;
};
constexpr Layer kLayers[] = {{512, 2048}, {2048, 512}};
constexpr int64_t kRows[] = {1, 8, 32};
// A prompt's chunk: float32 goes to sgemm there, and compact weights could be
// widened to float32 for sgemm instead of streamed (*_widened measures that).
constexpr int64_t kPrefillRows = 256;

// Copies of one layer's weights in every format.
struct WeightSet {
  int64_t in = 0, out = 0, copies = 0;
  std::vector<torch::Tensor> fp32;
  std::vector<uint16_t> bf16;
  std::vector<int8_t> q;
  std::vector<float> scales;

  int64_t Weights() const { return in * out; }
  int64_t ScalesPerCopy() const { return out * kernels::cpu::Int8BlocksPerRow(in); }
};

int64_t CopiesFor(const Layer& layer) {
  const char* mib = std::getenv("PERFORMER_BENCH_WEIGHT_MIB");
  const double bytes = (mib != nullptr ? std::atof(mib) : 64.0) * 1024 * 1024;
  const double layer_bytes = 4.0 * static_cast<double>(layer.in * layer.out);
  return std::max<int64_t>(1, static_cast<int64_t>(bytes / layer_bytes + 0.5));
}

// Built once per layer and shared by its benchmarks.
const WeightSet& Weights(const Layer& layer) {
  static std::map<std::pair<int64_t, int64_t>, std::unique_ptr<WeightSet>> sets;
  std::unique_ptr<WeightSet>& set = sets[{layer.in, layer.out}];
  if (set != nullptr) return *set;
  set = std::make_unique<WeightSet>();
  set->in = layer.in;
  set->out = layer.out;
  set->copies = CopiesFor(layer);
  const int64_t n = set->Weights(), blocks = set->ScalesPerCopy();
  set->bf16.resize(n * set->copies);
  set->q.resize(n * set->copies);
  set->scales.resize(blocks * set->copies);
  torch::manual_seed(0);
  for (int64_t c = 0; c < set->copies; ++c) {
    torch::Tensor w = torch::randn({layer.out, layer.in}) * 0.02;
    kernels::cpu::ConvertToBf16(w.data_ptr<float>(), n, set->bf16.data() + c * n);
    if (!kernels::cpu::QuantizeInt8(w.data_ptr<float>(), layer.out, layer.in, set->q.data() + c * n,
                                    set->scales.data() + c * blocks)) {
      std::abort();  // randn is finite
    }
    set->fp32.push_back(std::move(w));
  }
  return *set;
}

enum class Format { kFp32, kBf16, kInt8 };

struct Variant {
  Format format;
  LinearPath path;       // kAuto for fp32
  bool widened = false;  // compact weights widened to float32 per call, then sgemm
};

std::string VariantName(const Variant& v) {
  if (v.format == Format::kFp32) return "fp32";
  return std::string(v.format == Format::kBf16 ? "bf16_" : "int8_") +
         (v.widened ? "widened" : kernels::cpu::LinearPathName(v.path));
}

double WeightBytes(const WeightSet& w, Format format) {
  const double n = static_cast<double>(w.Weights());
  switch (format) {
    case Format::kFp32:
      return 4 * n;
    case Format::kBf16:
      return 2 * n;
    case Format::kInt8:
      return n + 4.0 * static_cast<double>(w.ScalesPerCopy());
  }
  return 0;
}

void TimeLayer(benchmark::State& state, const Layer& layer, int64_t rows, const Variant& v) {
  torch::NoGradGuard no_grad;
  const WeightSet& w = Weights(layer);
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({rows, layer.in});
  std::vector<float> y(rows * layer.out);
  const int64_t n = w.Weights(), blocks = w.ScalesPerCopy();
  int64_t c = 0;
  // *_widened: the layer widened to float32 per call (bf16 exactly, int8 by
  // its scales) into one buffer, then sgemm.
  torch::Tensor widened = torch::empty({layer.out, layer.in});
  for (auto _ : state) {
    if (v.widened) {
      if (v.format == Format::kInt8) {
        kernels::cpu::DequantizeInt8(w.q.data() + c * n, w.scales.data() + c * blocks, layer.out,
                                     layer.in, widened.data_ptr<float>());
      } else {
        kernels::cpu::ConvertFromBf16(w.bf16.data() + c * n, n, widened.data_ptr<float>());
      }
      torch::Tensor out = torch::mm(x, widened.t());
      benchmark::DoNotOptimize(out.data_ptr<float>());
      benchmark::ClobberMemory();
      c = (c + 1) % w.copies;
      continue;
    }
    switch (v.format) {
      case Format::kFp32: {
        // As the models' linear entry points: the skinny kernel for a decode
        // step's rows, sgemm for a prompt's.
        torch::Tensor out = rows == kPrefillRows ? torch::mm(x, w.fp32[c].t())
                                                 : kernels::SkinnyLinear(x, w.fp32[c]);
        benchmark::DoNotOptimize(out.data_ptr<float>());
        break;
      }
      case Format::kBf16:
        kernels::cpu::LinearBf16(x.data_ptr<float>(), w.bf16.data() + c * n, nullptr, y.data(),
                                 rows, layer.in, layer.out, v.path);
        break;
      case Format::kInt8:
        kernels::cpu::LinearInt8(x.data_ptr<float>(), w.q.data() + c * n,
                                 w.scales.data() + c * blocks, nullptr, y.data(), rows, layer.in,
                                 layer.out, v.path);
        break;
    }
    benchmark::ClobberMemory();
    c = (c + 1) % w.copies;
  }
  state.counters["weight_GB/s"] = benchmark::Counter(WeightBytes(w, v.format) / 1e9,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copies"] = static_cast<double>(w.copies);
}

struct Key {
  int64_t in, out, rows;
  bool operator<(const Key& o) const {
    return std::tie(in, out, rows) < std::tie(o.in, o.out, o.rows);
  }
};

// Which benchmark is which, by name, for the table.
std::map<std::string, std::pair<Key, std::string>>& Registry() {
  static std::map<std::string, std::pair<Key, std::string>> registry;
  return registry;
}

std::vector<Variant> Variants() {
  std::vector<Variant> variants = {{Format::kFp32, LinearPath::kAuto}};
  for (Format format : {Format::kBf16, Format::kInt8}) {
    const LinearWeights weights =
        format == Format::kBf16 ? LinearWeights::kBf16 : LinearWeights::kInt8;
    for (LinearPath path : {LinearPath::kAvx2, LinearPath::kAvx512}) {
      if (kernels::cpu::LinearPathAvailable(weights, path)) variants.push_back({format, path});
    }
    if (!kernels::cpu::LinearPathAvailable(weights, LinearPath::kAvx2)) {
      variants.push_back({format, LinearPath::kScalar});
    }
  }
  return variants;
}

// At kPrefillRows: fp32 (sgemm), the fastest streamed path and the widened
// tiles of each compact format.
std::vector<Variant> PrefillVariants(const std::vector<Variant>& variants) {
  std::vector<Variant> prefill = {variants.front()};
  for (Format format : {Format::kBf16, Format::kInt8}) {
    const LinearWeights weights =
        format == Format::kBf16 ? LinearWeights::kBf16 : LinearWeights::kInt8;
    prefill.push_back({format, kernels::cpu::ChosenLinearPath(weights)});
    prefill.push_back({format, LinearPath::kAuto, /*widened=*/true});
  }
  return prefill;
}

void RegisterAll(const std::vector<Variant>& variants) {
  std::vector<int64_t> all_rows(std::begin(kRows), std::end(kRows));
  all_rows.push_back(kPrefillRows);
  for (const Layer& layer : kLayers) {
    for (int64_t rows : all_rows) {
      for (const Variant& v : rows == kPrefillRows ? PrefillVariants(variants) : variants) {
        const std::string name = VariantName(v) + "/in:" + std::to_string(layer.in) +
                                 "/out:" + std::to_string(layer.out) +
                                 "/rows:" + std::to_string(rows);
        Registry()[name] = {Key{layer.in, layer.out, rows}, VariantName(v)};
        benchmark::RegisterBenchmark(
            name.c_str(),
            [layer, rows, v](benchmark::State& state) { TimeLayer(state, layer, rows, v); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
  }
}

// Console output as usual, plus each benchmark's time for the table: the
// fastest repetition (the least disturbed by other processes), or the median
// where only aggregates are reported (--benchmark_report_aggregates_only).
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      auto it = Registry().find(run.run_name.function_name);
      if (it == Registry().end() || run.error_occurred) continue;
      const bool iteration = run.run_type == Run::RT_Iteration;
      if (!iteration && run.aggregate_name != "median") continue;
      Result& r = results_[it->second.first][it->second.second];
      const double us = run.GetAdjustedRealTime();
      if (iteration ? (!r.from_iterations || us < r.us) : (!r.from_iterations && r.us == 0)) {
        r.us = us;
        r.gbps = run.counters.at("weight_GB/s").value;
        r.from_iterations = iteration;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }

  void PrintRatios(std::vector<Variant> variants) const {
    for (const Variant& v : PrefillVariants(variants)) {
      if (v.widened) variants.push_back(v);
    }
    std::printf("\n| in -> out | rows |");
    for (const Variant& v : variants)
      std::printf(" %s us (GB/s, x fp32) |", VariantName(v).c_str());
    std::printf("\n|---|---|");
    for (size_t i = 0; i < variants.size(); ++i) std::printf("---|");
    std::printf("\n");
    for (const auto& [key, by_variant] : results_) {
      auto fp32 = by_variant.find("fp32");
      std::printf("| %lld -> %lld | %lld |", static_cast<long long>(key.in),
                  static_cast<long long>(key.out), static_cast<long long>(key.rows));
      for (const Variant& v : variants) {
        auto it = by_variant.find(VariantName(v));
        if (it == by_variant.end()) {
          std::printf(" - |");
        } else if (fp32 == by_variant.end()) {
          std::printf(" %.1f (%.1f) |", it->second.us, it->second.gbps);
        } else {
          std::printf(" %.1f (%.1f, %.2fx) |", it->second.us, it->second.gbps,
                      fp32->second.us / it->second.us);
        }
      }
      std::printf("\n");
    }
  }

 private:
  struct Result {
    double us = 0;
    double gbps = 0;
    bool from_iterations = false;
  };
  std::map<Key, std::map<std::string, Result>> results_;
};

}  // namespace
}  // namespace performer::bench

int main(int argc, char** argv) {
  using performer::kernels::cpu::ChosenLinearPath;
  using performer::kernels::cpu::LinearPathName;
  using performer::kernels::cpu::LinearWeights;
  const char* threads = std::getenv("PERFORMER_BENCH_THREADS");
  torch::set_num_threads(threads != nullptr ? std::atoi(threads) : 2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("torch threads: %d; kAuto paths: bf16 %s, int8 %s\n", torch::get_num_threads(),
              LinearPathName(ChosenLinearPath(LinearWeights::kBf16)),
              LinearPathName(ChosenLinearPath(LinearWeights::kInt8)));
  const std::vector<performer::bench::Variant> variants = performer::bench::Variants();
  performer::bench::RegisterAll(variants);
  performer::bench::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios(variants);
  benchmark::Shutdown();
  return 0;
}
