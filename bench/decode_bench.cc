// Recurrent decoding of a PerformerLM (docs/benchmarks.md), on the bench
// model: vocab 256, dim 512, depth 6, heads 8, dim_head 64, nb_features 256,
// causal (random weights; speed does not depend on them).
//
//   1. time per decoded token at positions 64, 4096 and 16384 (median step
//      of 64 steps after a prefill of that length), with the state bytes per
//      sequence next to the KV cache a softmax transformer of the same shape
//      would hold at that position;
//   2. 512 new tokens from a 16-token prompt, batch 1: recurrent decoding vs
//      our own C++ PerformerLM re-running the full forward every step, as
//      performer-pytorch's generate() does (not the Python library itself);
//   3. batched step throughput for batch 1, 8, 32, 64 against the machine's
//      sgemm rate measured in the same run: efficiency = tokens/s x FLOPs per
//      token / sgemm FLOP/s.
//
// Usage: decode_bench [--threads N] [--reforward-tokens K] [--weight_dtype D]
// (default all cores, 512, fp32; D = fp32, bf16 or int8: the dtype the
// model's linear layers are served in, core/models/decode_step_options.h;
// flags also as --name=value). Prints a markdown report.
// --weight_dtype D1,D2,... (more than one) only compares the batched step of
// the listed dtypes in one run, interleaved round by round: each dtype's step
// time and speed-up over the first, and its bytes per step against the
// memory read bandwidth measured in the same run; then a 512-token prefill.
// --profile B only runs 300 steps at batch B (to look at with perf); --profile_prefill L only
// prefills an L-token prompt; --profile_forward N only runs the model's forward of N 16-token
// prompts as one batch.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_model.h"
#include "core/decoding/performer_decoder.h"
#include "core/models/decode_step_options.h"
#include "core/models/model_weights.h"
#include "core/models/performer_lm.h"
#include "core/runtime/torch_runtime.h"

namespace performer {
namespace {

using bench::BenchConfig;
using bench::BenchModel;
using bench::Median;
using bench::RandomTokens;
using Clock = std::chrono::steady_clock;

// --weight_dtype: how every decoder of this run steps.
decoding::PerformerDecoderOptions decoder_options;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Matmul FLOPs (2 per multiply-add) of one decoded token.
double FlopsPerToken(const models::PerformerLMConfig& c) {
  const double dim = c.dim, inner = c.heads * c.resolved_dim_head(), d = c.resolved_dim_head();
  const double m = c.resolved_nb_features(), h = c.heads, hidden = c.dim * c.ff_mult;
  const double projections = 2 * dim * inner * 3 + 2 * inner * dim;
  const double feed_forward = 2 * dim * hidden * 2;
  const double features = 2 * (2 * h * d * m);     // q' and k'
  const double state = 2 * (2 * h * m * (d + 1));  // update and read-out
  return c.depth * (projections + feed_forward + features + state) + 2 * dim * c.num_tokens;
}

double MeasureSgemmFlops() {
  torch::NoGradGuard no_grad;
  const int64_t n = 1024;
  torch::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::Tensor c = torch::mm(a, b);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = Clock::now();
    for (int i = 0; i < 4; ++i) torch::mm_out(c, a, b);
    best = std::max(best, 4 * 2.0 * n * n * n / Seconds(start));
  }
  return best;
}

// Bytes per second one pass of summing a 1 GiB float32 array reads, on all
// threads, best of 5: the bound a step that streams its weights can reach.
double MeasureReadBandwidth() {
  torch::NoGradGuard no_grad;
  const torch::Tensor big = torch::ones({int64_t{1} << 28});
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = Clock::now();
    const float sum = big.sum().item<float>();
    best = std::max(best, static_cast<double>(big.nbytes()) / Seconds(start));
    if (sum < 0) std::abort();  // keeps the pass
  }
  return best;
}

// The bytes of the weights a decode step reads: all of the model's but the
// embedding tables (token, position, rotary), of which it reads one row per
// sequence.
int64_t StepWeightBytes(const models::PerformerLMImpl& lm) {
  std::vector<torch::Tensor> read;
  for (const auto& named : {lm.named_parameters(), lm.named_buffers()}) {
    for (const auto& item : named) {
      if (item.key().find("emb") == std::string::npos) read.push_back(item.value());
    }
  }
  return models::DistinctStorageBytes(read);
}

// --weight_dtype D1,D2,...: the batched step of each dtype, one decoder
// each, timed in turn round by round so that machine noise spreads evenly.
int CompareWeightDtypes(int threads, const std::vector<models::WeightDtype>& dtypes) {
  TorchRuntimeInfo runtime = ConfigureTorchRuntime(threads);
  std::printf("# decode_bench: weight dtypes\n\n%s\n\n", DescribeTorchRuntime(runtime).c_str());
  const std::vector<int64_t> batches = {1, 8, 32, 64};
  std::vector<std::unique_ptr<decoding::PerformerDecoder>> decoders;
  std::vector<std::vector<decoding::SequenceId>> ids(dtypes.size());
  std::vector<int64_t> step_weight_bytes;
  for (size_t d = 0; d < dtypes.size(); ++d) {
    decoding::PerformerDecoderOptions options = decoder_options;
    options.step.weight_dtype = dtypes[d];
    torch::manual_seed(0);
    const models::LoadedModel model = BenchModel();
    decoders.push_back(*decoding::PerformerDecoder::Create(model, batches.back(), options));
    step_weight_bytes.push_back(StepWeightBytes(*model.lm));
    for (int64_t i = 0; i < batches.back(); ++i) {
      ids[d].push_back(*decoders[d]->Create());
      (void)decoders[d]->Prefill(ids[d].back(), {RandomTokens(16, 256), {}, {}});
    }
  }
  const double bandwidth = MeasureReadBandwidth();
  const int rounds = 7, steps = 10;
  // [batch][dtype] -> seconds per step, one per round.
  std::vector<std::vector<std::vector<double>>> seconds(
      batches.size(), std::vector<std::vector<double>>(dtypes.size()));
  for (int round = 0; round < rounds; ++round) {
    for (size_t b = 0; b < batches.size(); ++b) {
      const std::vector<int64_t> tokens = RandomTokens(batches[b], 256);
      for (size_t d = 0; d < dtypes.size(); ++d) {
        const std::vector<decoding::SequenceId> rows(ids[d].begin(), ids[d].begin() + batches[b]);
        (void)decoders[d]->Step(rows, tokens);
        auto t0 = Clock::now();
        for (int i = 0; i < steps; ++i) (void)decoders[d]->Step(rows, tokens);
        seconds[b][d].push_back(Seconds(t0) / steps);
      }
    }
  }
  std::printf(
      "read bandwidth (sum of 1 GiB, best of 5): %.1f GB/s; %d rounds of %d steps, "
      "median\n\n",
      bandwidth / 1e9, rounds, steps);
  std::printf(
      "| dtype | weight bytes | of which a step reads (all but the embedding tables) | state "
      "bytes per sequence |\n|---|---:|---:|---:|\n");
  for (size_t d = 0; d < dtypes.size(); ++d) {
    std::printf("| %s | %lld | %lld | %lld |\n", models::WeightDtypeName(dtypes[d]),
                static_cast<long long>(decoders[d]->info().weight_bytes),
                static_cast<long long>(step_weight_bytes[d]),
                static_cast<long long>(decoders[d]->info().state_bytes_per_sequence));
  }
  std::printf("\n| batch |");
  for (models::WeightDtype dtype : dtypes) {
    std::printf(" %s step ms | %s x %s | %s of read bound |", models::WeightDtypeName(dtype),
                models::WeightDtypeName(dtype), models::WeightDtypeName(dtypes.front()),
                models::WeightDtypeName(dtype));
  }
  std::printf("\n|---:|");
  for (size_t d = 0; d < dtypes.size(); ++d) std::printf("---:|---:|---:|");
  std::printf("\n");
  for (size_t b = 0; b < batches.size(); ++b) {
    std::printf("| %lld |", static_cast<long long>(batches[b]));
    const double base = Median(seconds[b][0]);
    for (size_t d = 0; d < dtypes.size(); ++d) {
      const double s = Median(seconds[b][d]);
      // A step reads every weight once and reads and writes each row's state.
      const double bytes = static_cast<double>(step_weight_bytes[d]) +
                           2.0 * static_cast<double>(batches[b]) *
                               static_cast<double>(decoders[d]->info().state_bytes_per_sequence);
      std::printf(" %.2f | %.2fx | %.0f%% |", s * 1e3, base / s, 100.0 * bytes / s / bandwidth);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  // A prompt's prefill (one 512-token chunk, as the server takes it), each
  // dtype in turn, median of 5.
  constexpr int64_t kPrompt = 512;
  std::vector<std::vector<double>> prefill(dtypes.size());
  for (int round = 0; round < 5; ++round) {
    const std::vector<int64_t> prompt = RandomTokens(kPrompt, 256);
    for (size_t d = 0; d < dtypes.size(); ++d) {
      (void)decoders[d]->Release(ids[d].front());
      ids[d].front() = *decoders[d]->Create();
      auto t0 = Clock::now();
      (void)decoders[d]->Prefill(ids[d].front(), {prompt, {}, {}});
      prefill[d].push_back(Seconds(t0));
    }
  }
  std::printf("\n| prefill of %lld tokens |", static_cast<long long>(kPrompt));
  for (models::WeightDtype dtype : dtypes) std::printf(" %s ms |", models::WeightDtypeName(dtype));
  std::printf("\n|---|");
  for (size_t d = 0; d < dtypes.size(); ++d) std::printf("---:|");
  std::printf("\n| median of 5 |");
  for (size_t d = 0; d < dtypes.size(); ++d) {
    std::printf(" %.1f (%.2fx) |", Median(prefill[d]) * 1e3,
                Median(prefill[0]) / Median(prefill[d]));
  }
  std::printf("\n");
  return 0;
}

// --profile B: only 300 steps at batch B (for perf record).
int Profile(int threads, int64_t batch) {
  ConfigureTorchRuntime(threads);
  auto decoder = *decoding::PerformerDecoder::Create(BenchModel(), batch, decoder_options);
  std::vector<decoding::SequenceId> ids;
  for (int64_t i = 0; i < batch; ++i) {
    ids.push_back(*decoder->Create());
    (void)decoder->Prefill(ids.back(), {RandomTokens(16, 256), {}, {}});
  }
  std::vector<int64_t> tokens = RandomTokens(batch, 256);
  for (int i = 0; i < 20; ++i) (void)decoder->Step(ids, tokens);
  auto start = Clock::now();
  for (int i = 0; i < 300; ++i) (void)decoder->Step(ids, tokens);
  std::printf("batch %lld: %.3f ms per step\n", static_cast<long long>(batch),
              Seconds(start) / 300 * 1e3);
  return 0;
}

// --profile_prefill L: only 100 prefills of an L-token prompt (for perf
// record).
int ProfilePrefill(int threads, int64_t length) {
  ConfigureTorchRuntime(threads);
  auto decoder = *decoding::PerformerDecoder::Create(BenchModel(), 1, decoder_options);
  const decoding::PrefillRequest prompt{RandomTokens(length, 256), {}, {}};
  auto run = [&] {
    const decoding::SequenceId id = *decoder->Create();
    (void)decoder->Prefill(id, prompt);
    (void)decoder->Release(id);
  };
  for (int i = 0; i < 5; ++i) run();
  auto start = Clock::now();
  for (int i = 0; i < 100; ++i) run();
  std::printf("prompt %lld: %.3f ms per prefill\n", static_cast<long long>(length),
              Seconds(start) / 100 * 1e3);
  return 0;
}

// --profile_forward N: only 20 forwards of N 16-token prompts as one [N, 16]
// batch, without autograd (what a prefill batched over prompts would cost).
int ProfileForward(int threads, int64_t prompts) {
  ConfigureTorchRuntime(threads);
  models::LoadedModel model = BenchModel();
  c10::InferenceMode inference;
  constexpr int64_t kPromptTokens = 16;
  const torch::Tensor tokens = torch::randint(256, {prompts, kPromptTokens}, torch::kLong);
  for (int i = 0; i < 3; ++i) (void)model.lm->forward(tokens);
  auto start = Clock::now();
  for (int i = 0; i < 20; ++i) (void)model.lm->forward(tokens);
  const double ms = Seconds(start) / 20 * 1e3;
  std::printf("%lld prompts of %lld tokens: %.3f ms per forward, %.3f ms per prompt\n",
              static_cast<long long>(prompts), static_cast<long long>(kPromptTokens), ms,
              ms / static_cast<double>(prompts));
  return 0;
}

int Run(int threads, int64_t reforward_tokens) {
  TorchRuntimeInfo runtime = ConfigureTorchRuntime(threads);
  std::printf("# decode_bench\n\n%s\n\n", DescribeTorchRuntime(runtime).c_str());
  models::LoadedModel model = BenchModel();
  models::PerformerLM lm = model.lm;
  const models::PerformerLMConfig config = BenchConfig();
  auto decoder = *decoding::PerformerDecoder::Create(model, 64, decoder_options);
  const int64_t state_bytes = decoder->info().state_bytes_per_sequence;
  const int64_t kv_bytes_per_token = 2 * config.depth * config.heads * 64 * 4;

  // 1. Flat per-token time. The three sequences are stepped in turn, so
  // that machine noise spreads evenly over the positions.
  std::printf("decode weights: %s\n\n", models::WeightDtypeName(decoder_options.step.weight_dtype));
  std::printf("## Time per decoded token vs position (batch 1)\n\n");
  std::printf(
      "| position | prefill s | step ms (median of 64) | vs pos 64 | state bytes | softmax KV "
      "cache bytes |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|\n");
  const std::vector<int64_t> positions = {64, 4096, 16384};
  std::vector<decoding::SequenceId> ids;
  std::vector<double> prefill_s;
  std::vector<int64_t> next_token;
  for (int64_t position : positions) {
    ids.push_back(*decoder->Create());
    auto start = Clock::now();
    absl::StatusOr<torch::Tensor> logits =
        decoder->Prefill(ids.back(), {RandomTokens(position, 256), {}, {}});
    prefill_s.push_back(Seconds(start));
    if (!logits.ok()) {
      std::fprintf(stderr, "prefill failed: %s\n", std::string(logits.status().message()).c_str());
      return 1;
    }
    next_token.push_back(logits->argmax().item<int64_t>());
  }
  std::vector<std::vector<double>> step_ms(positions.size());
  for (int rep = 0; rep < 64; ++rep) {
    for (size_t s = 0; s < positions.size(); ++s) {
      auto t0 = Clock::now();
      absl::StatusOr<torch::Tensor> next = decoder->Step({ids[s]}, {next_token[s]});
      step_ms[s].push_back(Seconds(t0) * 1e3);
      next_token[s] = (*next)[0].argmax().item<int64_t>();
    }
  }
  const double base_ms = Median(step_ms[0]);
  for (size_t s = 0; s < positions.size(); ++s) {
    const double ms = Median(step_ms[s]);
    std::printf("| %lld | %.2f | %.3f | %.3f | %lld | %lld |\n",
                static_cast<long long>(positions[s]), prefill_s[s], ms, ms / base_ms,
                static_cast<long long>(state_bytes),
                static_cast<long long>(kv_bytes_per_token * positions[s]));
    (void)decoder->Release(ids[s]);
  }
  std::fflush(stdout);

  // 2. Recurrent vs full re-forward.
  std::printf("\n## %lld new tokens from a 16-token prompt, batch 1 (greedy)\n\n",
              static_cast<long long>(reforward_tokens));
  std::vector<int64_t> prompt = RandomTokens(16, 256);
  auto start = Clock::now();
  {
    decoding::SequenceId id = *decoder->Create();
    torch::Tensor logits = *decoder->Prefill(id, {prompt, {}, {}});
    for (int64_t i = 0; i < reforward_tokens; ++i) {
      logits = (*decoder->Step({id}, {logits.argmax().item<int64_t>()}))[0];
    }
    (void)decoder->Release(id);
  }
  const double recurrent_s = Seconds(start);
  start = Clock::now();
  {
    torch::NoGradGuard no_grad;
    torch::Tensor seq = torch::tensor(prompt, torch::kLong).unsqueeze(0);
    for (int64_t i = 0; i < reforward_tokens; ++i) {
      torch::Tensor next = lm(seq).select(1, seq.size(1) - 1).argmax(-1, true);
      seq = torch::cat({seq, next}, 1);
    }
  }
  const double reforward_s = Seconds(start);
  std::printf("| method | seconds | tokens/s | speed-up |\n|---|---:|---:|---:|\n");
  std::printf(
      "| full re-forward, our C++ PerformerLM (as performer-pytorch generate() does) | %.2f | %.1f "
      "| 1.0 |\n",
      reforward_s, reforward_tokens / reforward_s);
  std::printf("| recurrent (PerformerDecoder) | %.3f | %.1f | %.1f |\n", recurrent_s,
              reforward_tokens / recurrent_s, reforward_s / recurrent_s);
  std::fflush(stdout);

  // 3. Batched throughput.
  const double sgemm = MeasureSgemmFlops();
  const double flops = FlopsPerToken(config);
  std::printf(
      "\n## Batched step throughput\n\nsgemm (1024^3, best of 5): %.1f GFLOP/s; "
      "FLOPs per token: %.1f M\n\n",
      sgemm / 1e9, flops / 1e6);
  std::printf("| batch | step ms | tokens/s | GFLOP/s | of sgemm |\n|---:|---:|---:|---:|---:|\n");
  for (int64_t batch : {1, 8, 32, 64}) {
    std::vector<decoding::SequenceId> ids;
    for (int64_t i = 0; i < batch; ++i) {
      ids.push_back(*decoder->Create());
      (void)decoder->Prefill(ids.back(), {RandomTokens(16, 256), {}, {}});
    }
    std::vector<int64_t> tokens = RandomTokens(batch, 256);
    for (int i = 0; i < 3; ++i) (void)decoder->Step(ids, tokens);
    const int steps = 20;
    auto t0 = Clock::now();
    for (int i = 0; i < steps; ++i) (void)decoder->Step(ids, tokens);
    const double s = Seconds(t0);
    const double tokens_per_s = batch * steps / s;
    std::printf("| %lld | %.2f | %.0f | %.1f | %.0f%% |\n", static_cast<long long>(batch),
                s / steps * 1e3, tokens_per_s, tokens_per_s * flops / 1e9,
                100.0 * tokens_per_s * flops / sgemm);
    std::fflush(stdout);
    for (decoding::SequenceId id : ids) (void)decoder->Release(id);
  }
  return 0;
}

}  // namespace
}  // namespace performer

int main(int argc, char** argv) {
  int threads = 0;
  int64_t reforward_tokens = 512;
  int64_t profile_batch = 0;
  int64_t profile_prefill = 0;
  int64_t profile_forward = 0;
  std::vector<performer::models::WeightDtype> dtypes;
  // --name=value is --name value.
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      args.push_back(arg.substr(0, eq));
      args.push_back(arg.substr(eq + 1));
    } else {
      args.push_back(arg);
    }
  }
  std::vector<char*> pointers = {argv[0]};
  for (std::string& a : args) pointers.push_back(a.data());
  argc = static_cast<int>(pointers.size());
  argv = pointers.data();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--weight_dtype") == 0) {
      for (const absl::string_view name : absl::StrSplit(argv[i + 1], ',')) {
        const std::optional<performer::models::WeightDtype> dtype =
            performer::models::ParseWeightDtype(std::string_view(name.data(), name.size()));
        if (!dtype.has_value()) {
          std::fprintf(stderr, "--weight_dtype must list fp32, bf16 or int8, got '%s'\n",
                       argv[i + 1]);
          return 2;
        }
        dtypes.push_back(*dtype);
      }
      performer::decoder_options.step.weight_dtype = dtypes.front();
    }
    if (std::strcmp(argv[i], "--profile") == 0) profile_batch = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--profile_prefill") == 0) profile_prefill = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--profile_forward") == 0) profile_forward = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reforward-tokens") == 0) reforward_tokens = std::atoll(argv[i + 1]);
  }
  if (dtypes.size() > 1) return performer::CompareWeightDtypes(threads, dtypes);
  if (profile_batch > 0) return performer::Profile(threads, profile_batch);
  if (profile_prefill > 0) return performer::ProfilePrefill(threads, profile_prefill);
  if (profile_forward > 0) return performer::ProfileForward(threads, profile_forward);
  return performer::Run(threads, reforward_tokens);
}
