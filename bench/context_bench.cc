// Decoding speed and memory per sequence vs context length: the Performer's
// constant-size recurrent state against a softmax transformer's KV cache, on
// the same machine in the same run.
//
// Performer: the bench model (bench/bench_model.h) in the server's decoder
// (PerformerDecoder): a prompt of L tokens is prefilled, then the median of
// --steps decode steps at batch 1 is taken. Memory per sequence: the
// decoder's exact state bytes.
//
// Softmax baseline: a pre-norm transformer of the same shape (dim 512, depth
// 6, 8 heads of 64, feed-forward 2048, vocab 256, fp32, its projections with
// the same skinny-GEMM kernel as the Performer decoder) decoding one token
// against a KV cache that is preallocated to the longest length and filled
// up to position L (the best case for softmax decoding: no copy per step,
// one attention over the L cached keys per layer and head). Its step reads
// 2 x depth x L x heads x dim_head floats of cache; memory per sequence is
// that cache.
//
// Usage: context_bench [--lengths=256,1024,4096,16384] [--steps=32]
//                      [--threads=N] [--data_out=FILE]
// Prints a markdown table; --data_out also writes the numbers as
// whitespace-separated columns for tools/plot_context_bench.sh (gnuplot).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "bench/bench_model.h"
#include "core/decoding/performer_decoder.h"
#include "core/runtime/torch_runtime.h"
#include "kernels/skinny_linear.h"

ABSL_FLAG(std::vector<std::string>, lengths,
          std::vector<std::string>({"256", "1024", "4096", "16384"}),
          "Context lengths (tokens already in the sequence when the step runs).");
ABSL_FLAG(int32_t, steps, 32, "Decode steps timed per length (the median is reported).");
ABSL_FLAG(int32_t, threads, 0, "LibTorch intra-op threads (0 = one per CPU).");
ABSL_FLAG(std::string, data_out, "", "Also write the results here, one row per length.");

namespace performer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// A softmax decoder of the bench model's shape with a preallocated KV cache
// for one sequence.
class SoftmaxKvDecoder {
 public:
  SoftmaxKvDecoder(const models::PerformerLMConfig& c, int64_t max_len)
      : depth_(c.depth), heads_(c.heads), dim_head_(c.resolved_dim_head()), dim_(c.dim) {
    torch::manual_seed(1);
    auto w = [](int64_t rows, int64_t cols) { return torch::randn({rows, cols}) * 0.02; };
    embedding_ = w(c.num_tokens, dim_);
    for (int64_t l = 0; l < depth_; ++l) {
      Layer layer;
      layer.qkv = w(3 * heads_ * dim_head_, dim_);
      layer.out = w(dim_, heads_ * dim_head_);
      layer.ff1 = w(dim_ * c.ff_mult, dim_);
      layer.ff2 = w(dim_, dim_ * c.ff_mult);
      layer.keys = torch::randn({heads_, max_len, dim_head_});
      layer.values = torch::randn({heads_, max_len, dim_head_});
      layers_.push_back(std::move(layer));
    }
    logits_ = w(c.num_tokens, dim_);
  }

  int64_t CacheBytes(int64_t length) const {
    return 2 * depth_ * length * heads_ * dim_head_ * static_cast<int64_t>(sizeof(float));
  }

  // One token at position `position` (the cache holds positions < position):
  // writes its key/value and attends over positions 0..position.
  torch::Tensor Step(int64_t token, int64_t position) {
    torch::NoGradGuard no_grad;
    torch::Tensor x = embedding_[token].unsqueeze(0);  // (1, dim)
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim_head_));
    for (Layer& layer : layers_) {
      torch::Tensor h = torch::layer_norm(x, {dim_});
      torch::Tensor qkv = Linear(h, layer.qkv).view({3, heads_, dim_head_});
      layer.keys.select(1, position).copy_(qkv[1]);
      layer.values.select(1, position).copy_(qkv[2]);
      torch::Tensor keys = layer.keys.narrow(1, 0, position + 1);                       // (H, t, E)
      torch::Tensor values = layer.values.narrow(1, 0, position + 1);                   // (H, t, D)
      torch::Tensor scores = torch::bmm(keys, qkv[0].unsqueeze(2)).squeeze(2) * scale;  // (H, t)
      torch::Tensor attended =
          torch::bmm(torch::softmax(scores, -1).unsqueeze(1), values).view({1, -1});
      x = x + Linear(attended, layer.out);
      h = torch::layer_norm(x, {dim_});
      x = x + Linear(torch::gelu(Linear(h, layer.ff1)), layer.ff2);
    }
    return Linear(torch::layer_norm(x, {dim_}), logits_);
  }

 private:
  static torch::Tensor Linear(const torch::Tensor& x, const torch::Tensor& weight) {
    return kernels::SkinnyLinear(x, weight);
  }
  struct Layer {
    torch::Tensor qkv, out, ff1, ff2, keys, values;
  };
  int64_t depth_, heads_, dim_head_, dim_;
  torch::Tensor embedding_, logits_;
  std::vector<Layer> layers_;
};

struct Row {
  int64_t length = 0;
  double performer_ms = 0, softmax_ms = 0;
  int64_t performer_bytes = 0, softmax_bytes = 0;
};

int Run() {
  const TorchRuntimeInfo runtime = ConfigureTorchRuntime(absl::GetFlag(FLAGS_threads));
  std::vector<int64_t> lengths;
  for (const std::string& text : absl::GetFlag(FLAGS_lengths)) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(text, &value) || value < 1) {
      std::fprintf(stderr, "context_bench: --lengths: %s is not a positive integer\n",
                   text.c_str());
      return 2;
    }
    lengths.push_back(value);
  }
  const int steps = std::max(1, absl::GetFlag(FLAGS_steps));
  int64_t longest = 0;
  for (int64_t l : lengths) longest = std::max(longest, l);
  const int64_t max_len = longest + steps + 8;

  const models::PerformerLMConfig config = bench::BenchConfig(max_len);
  auto decoder = *decoding::PerformerDecoder::Create(bench::BenchModel(config), 1);
  SoftmaxKvDecoder softmax(config, max_len);
  const int64_t state_bytes = decoder->info().state_bytes_per_sequence;

  std::printf("# context_bench\n\n%s\n\n", DescribeTorchRuntime(runtime).c_str());
  std::printf(
      "Batch 1, fp32; Performer = PerformerDecoder on the bench model (dim 512, depth 6, 8 heads "
      "of 64, 256 random features); softmax = the same shape with a preallocated KV cache. "
      "Step time is the median of %d steps.\n\n",
      steps);
  std::printf(
      "| context | Performer step ms | softmax step ms | Performer tokens/s | softmax tokens/s | "
      "speed ratio | Performer state bytes | softmax KV bytes | memory ratio |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::vector<Row> rows;
  for (int64_t length : lengths) {
    Row row;
    row.length = length;
    // Performer: a real prefill of `length` tokens, then timed steps.
    decoding::SequenceId id = *decoder->Create();
    (void)decoder->Prefill(id, {bench::RandomTokens(length, config.num_tokens), {}, {}});
    std::vector<double> performer_ms;
    for (int s = 0; s < steps; ++s) {
      const auto start = Clock::now();
      (void)decoder->Step({id}, {s % config.num_tokens});
      performer_ms.push_back(Seconds(start) * 1e3);
    }
    (void)decoder->Release(id);
    // Softmax: steps at positions length, length + 1, ... (cache filled).
    std::vector<double> softmax_ms;
    for (int s = 0; s < steps; ++s) {
      const auto start = Clock::now();
      (void)softmax.Step(s % config.num_tokens, length + s);
      softmax_ms.push_back(Seconds(start) * 1e3);
    }
    row.performer_ms = bench::Median(performer_ms);
    row.softmax_ms = bench::Median(softmax_ms);
    row.performer_bytes = state_bytes;
    row.softmax_bytes = softmax.CacheBytes(length);
    rows.push_back(row);
    std::printf("| %lld | %.2f | %.2f | %.0f | %.0f | %.2fx | %lld | %lld | %.1fx |\n",
                static_cast<long long>(length), row.performer_ms, row.softmax_ms,
                1e3 / row.performer_ms, 1e3 / row.softmax_ms, row.softmax_ms / row.performer_ms,
                static_cast<long long>(row.performer_bytes),
                static_cast<long long>(row.softmax_bytes),
                static_cast<double>(row.softmax_bytes) / static_cast<double>(row.performer_bytes));
    std::fflush(stdout);
  }
  const std::string data_out = absl::GetFlag(FLAGS_data_out);
  if (!data_out.empty()) {
    std::ofstream out(data_out);
    out << "# context performer_tokens_per_s softmax_tokens_per_s performer_state_mib "
           "softmax_kv_mib\n";
    for (const Row& r : rows) {
      out << r.length << " " << 1e3 / r.performer_ms << " " << 1e3 / r.softmax_ms << " "
          << static_cast<double>(r.performer_bytes) / (1 << 20) << " "
          << static_cast<double>(r.softmax_bytes) / (1 << 20) << "\n";
    }
    if (!out) {
      std::fprintf(stderr, "context_bench: cannot write %s\n", data_out.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace performer

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return performer::Run();
}
