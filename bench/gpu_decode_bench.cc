// Whole-model recurrent decoding on the GPU against the CPU, in one run, on
// the bench model (bench/bench_model.h: causal PerformerLM, vocab 256, dim
// 512, depth 6, heads 8, dim_head 64, nb_features 256, fp32).
//
// For batch B = 1, 64, 256 it times PerformerDecoder::Step, the batched
// step the serving engine runs once per iteration (every sequence of the
// batch advances one token; the logits come back to the host for sampling),
// after a 16-token prefill of each sequence:
//   - tokens/s on the CPU (all cores), on CUDA stepping eagerly and on CUDA
//     replaying the step's CUDA graphs (decoding/cuda_step_graphs.h), and
//     the ratios, and the graphs again with each decode-step kernel forced
//     (kernels::CudaStepKernel: kRowBlocks, kVectorSplit, kClusterSplit; the default picks
//     one by shape);
//   - with graphs, the achieved memory bandwidth: (weight bytes + B x state
//     bytes) read per step / step time, as a fraction of the device copy
//     bandwidth measured in the same run (bench/gpu_reference.h).
//
// Then the fused step (core/models/decode_step_options.h) with CUDA graphs at
// B = 1, 8, 64, 256 against the separate ops: float32 weights (its own
// kernel up to kernels::CudaFusedLinearMaxRows() rows, cuBLAS above; its
// own kernel at every batch; and with the FAVOR+ projection in the state
// kernel, DecodeStepOptions::favor_projection_in_step) and bf16 weights
// (also with the tensor-core projections above the threshold,
// kernels::SetCudaFusedLinearTensorCores); each with the bytes a step reads
// (decode weights in their dtype + B states) as a fraction of the copy
// bandwidth.
//
// Then a prompt of 1k / 4k / 16k tokens prefilled in chunks of 512 as the
// server does (Prefill, then Extend per chunk: the chunkwise prefill kernel
// continuing each layer's state), tokens/s on the CPU and on CUDA.
//
// Then the cost of the same bits (kernels::CudaRowInvariance(), the
// server's --cuda_same_bits): the fused fp32 step with CUDA graphs at B = 1,
// 64, 256 and the chunked prefill of 1k / 4k tokens, each without and with
// it, in one run.
//
// Usage: gpu_decode_bench [--cpu-steps N] [--cuda-steps N] [--fused-only 1]
// [--same-bits-only 1] (default 8, 100; --fused-only prints the fused step's
// table alone, --same-bits-only the same bits' table alone).
// Prints a markdown report; exits 1 where LibTorch has no CUDA device.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "bench/bench_model.h"
#include "bench/gpu_reference.h"
#include "core/decoding/performer_decoder.h"
#include "core/models/performer_lm.h"
#include "kernels/cuda_row_invariance.h"
#include "kernels/fused_linear.h"
#include "kernels/linear_state_step.h"

namespace performer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

int64_t WeightBytes(const torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const torch::Tensor& t : module.parameters()) bytes += t.numel() * t.element_size();
  for (const torch::Tensor& t : module.buffers()) bytes += t.numel() * t.element_size();
  return bytes;
}

struct StepTiming {
  double seconds_per_step = 0;
  int64_t state_bytes_per_sequence = 0;
};

// A fresh copy of the (seeded) bench model per run, moved to `device`.
StepTiming TimeSteps(const torch::Device& device, int64_t batch, int steps, bool cuda_graphs,
                     const models::DecodeStepOptions& step_options = {}) {
  torch::manual_seed(0);
  models::LoadedModel model = bench::BenchModel(bench::BenchConfig(1024));
  model.MoveTo(device);
  absl::StatusOr<std::unique_ptr<decoding::PerformerDecoder>> decoder =
      decoding::PerformerDecoder::Create(std::move(model), batch, {cuda_graphs, step_options});
  if (!decoder.ok()) {
    std::fprintf(stderr, "decoder: %s\n", std::string(decoder.status().message()).c_str());
    std::exit(1);
  }
  if (cuda_graphs && !(*decoder)->info().cuda_graphs) {
    std::fprintf(stderr, "CUDA graphs: %s\n",
                 std::string((*decoder)->cuda_graphs_status().message()).c_str());
    std::exit(1);
  }
  std::vector<decoding::SequenceId> ids;
  std::vector<int64_t> tokens;
  decoding::PrefillRequest prompt;
  prompt.prompt = bench::RandomTokens(16, 256);
  for (int64_t b = 0; b < batch; ++b) {
    absl::StatusOr<decoding::SequenceId> id = (*decoder)->Create();
    if (!id.ok() || !(*decoder)->Prefill(*id, prompt).ok()) {
      std::fprintf(stderr, "prefill failed\n");
      std::exit(1);
    }
    ids.push_back(*id);
    tokens.push_back(b % 256);
  }
  auto step = [&] {
    absl::StatusOr<torch::Tensor> logits = (*decoder)->Step(ids, tokens);
    if (!logits.ok()) {
      std::fprintf(stderr, "step: %s\n", std::string(logits.status().message()).c_str());
      std::exit(1);
    }
  };
  for (int i = 0; i < 3; ++i) step();  // warm-up (allocator, kernels' first launch)
  if (device.is_cuda()) torch::cuda::synchronize();
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < steps; ++i) step();  // each step returns host logits: synchronous
  StepTiming timing;
  timing.seconds_per_step = Seconds(start) / steps;
  timing.state_bytes_per_sequence = (*decoder)->info().state_bytes_per_sequence;
  return timing;
}

// Bytes of the 2-D weights a bf16 decode step keeps in bf16 (the
// projections, feed-forwards and output head): named *.weight, not the
// embeddings or the positional table.
int64_t ConvertedWeightBytes(const torch::nn::Module& module) {
  int64_t bytes = 0;
  for (const auto& p : module.named_parameters()) {
    const std::string& name = p.key();
    if (p.value().dim() != 2 || name.find("emb") != std::string::npos) continue;
    bytes += p.value().numel() * p.value().element_size();
  }
  return bytes;
}

// The fused step's table (see the top of this file).
void FusedStepTable(const torch::Device& cuda, const models::LoadedModel& model, int steps,
                    double copy_bandwidth) {
  const int64_t weight_bytes = WeightBytes(*model.lm);
  const int64_t converted = ConvertedWeightBytes(*model.lm);
  std::printf(
      "\n## Fused decode step (CUDA graphs), bench model\n\n"
      "bf16 keeps %.1f MB of the %.1f MB of weights in bf16.\n\n"
      "| B | separate ops step (ms) | fused fp32 step (ms) | fused fp32, own kernel at every B "
      "(ms) | fused fp32, projection in state kernel (ms) | fused bf16 step (ms) | fused bf16, "
      "tensor cores (ms) | fused fp32 / separate | projection in state kernel / fused fp32 "
      "(speed) | fused bf16 / separate | tensor cores / fused bf16 (speed) | bf16 bytes read / "
      "step (MB) | bf16 of copy bandwidth | fp32 of copy bandwidth |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      converted / 2e6, weight_bytes / 1e6);
  const std::vector<bench::DecodeStepVariant> variants = bench::DecodeStepVariants();
  const models::DecodeStepOptions& separate_ops = variants[0].step;
  const models::DecodeStepOptions& fp32 = variants[1].step;
  const models::DecodeStepOptions& bf16 = variants[2].step;
  models::DecodeStepOptions projected = fp32;
  projected.favor_projection_in_step = true;
  for (int64_t batch : {1, 8, 64, 256}) {
    const StepTiming separate = TimeSteps(cuda, batch, steps, true, separate_ops);
    const StepTiming fused = TimeSteps(cuda, batch, steps, true, fp32);
    const int64_t threshold = kernels::CudaFusedLinearMaxRows();
    kernels::SetCudaFusedLinearMaxRows(1 << 20);
    const StepTiming own = TimeSteps(cuda, batch, steps, true, fp32);
    kernels::SetCudaFusedLinearMaxRows(threshold);
    const StepTiming in_kernel = TimeSteps(cuda, batch, steps, true, projected);
    const StepTiming half = TimeSteps(cuda, batch, steps, true, bf16);
    kernels::SetCudaFusedLinearTensorCores(true);
    const StepTiming mma = TimeSteps(cuda, batch, steps, true, bf16);
    kernels::SetCudaFusedLinearTensorCores(false);
    const double state = static_cast<double>(batch * fused.state_bytes_per_sequence);
    const double bf16_bytes = static_cast<double>(weight_bytes - converted / 2) + state;
    const double fp32_bytes = static_cast<double>(weight_bytes) + state;
    std::printf(
        "| %ld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.2fx | %.2fx | %.1f | "
        "%.1f%% | %.1f%% |\n",
        static_cast<long>(batch), separate.seconds_per_step * 1e3, fused.seconds_per_step * 1e3,
        own.seconds_per_step * 1e3, in_kernel.seconds_per_step * 1e3, half.seconds_per_step * 1e3,
        mma.seconds_per_step * 1e3, separate.seconds_per_step / fused.seconds_per_step,
        fused.seconds_per_step / in_kernel.seconds_per_step,
        separate.seconds_per_step / half.seconds_per_step,
        half.seconds_per_step / mma.seconds_per_step, bf16_bytes / 1e6,
        100.0 * bf16_bytes / half.seconds_per_step / copy_bandwidth,
        100.0 * fp32_bytes / fused.seconds_per_step / copy_bandwidth);
    std::fflush(stdout);
  }
}

// Seconds to prefill a `length`-token prompt in chunks of 512 tokens as the
// server does (Prefill, then Extend per chunk), after one warm-up prompt.
double PrefillSeconds(const torch::Device& device, int64_t length) {
  constexpr int64_t kChunk = 512;
  torch::manual_seed(0);
  models::LoadedModel model = bench::BenchModel(bench::BenchConfig(length + 16));
  model.MoveTo(device);
  std::unique_ptr<decoding::PerformerDecoder> decoder =
      *decoding::PerformerDecoder::Create(std::move(model), 1, {false, {}});
  const std::vector<int64_t> prompt = bench::RandomTokens(length, 256);
  auto run = [&] {
    const decoding::SequenceId id = *decoder->Create();
    bool ok = decoder->Prefill(id, {{prompt.begin(), prompt.begin() + kChunk}, {}, {}}).ok();
    for (int64_t done = kChunk; ok && done < length; done += kChunk) {
      ok = decoder->Extend(id, {prompt.begin() + done, prompt.begin() + done + kChunk}).ok();
    }
    if (!ok || !decoder->Release(id).ok()) {
      std::fprintf(stderr, "chunked prefill failed\n");
      std::exit(1);
    }
  };
  run();  // warm-up
  if (device.is_cuda()) torch::cuda::synchronize();
  const Clock::time_point start = Clock::now();
  run();  // each chunk returns host logits: synchronous
  return Seconds(start);
}

// The same bits' table (see the top of this file).
void SameBitsTable(const torch::Device& cuda, int steps) {
  std::printf(
      "\n## The same bits on the GPU (kernels::CudaRowInvariance), bench model\n\n"
      "| measure | default | same bits | same bits / default (time) |\n|---|---|---|---|\n");
  const models::DecodeStepOptions fp32 = bench::DecodeStepVariants()[1].step;
  for (int64_t batch : {1, 64, 256}) {
    const StepTiming fast = TimeSteps(cuda, batch, steps, true, fp32);
    StepTiming exact;
    {
      const kernels::ScopedCudaRowInvariance invariant(true);
      exact = TimeSteps(cuda, batch, steps, true, fp32);
    }
    std::printf("| fused fp32 step, B = %ld (ms) | %.3f | %.3f | %.2fx |\n",
                static_cast<long>(batch), fast.seconds_per_step * 1e3, exact.seconds_per_step * 1e3,
                exact.seconds_per_step / fast.seconds_per_step);
    std::fflush(stdout);
  }
  for (int64_t length : {1024, 4096}) {
    const double fast = PrefillSeconds(cuda, length);
    double exact = 0;
    {
      const kernels::ScopedCudaRowInvariance invariant(true);
      exact = PrefillSeconds(cuda, length);
    }
    std::printf("| prefill of %ld tokens (tokens/s) | %.0f | %.0f | %.2fx |\n",
                static_cast<long>(length), length / fast, length / exact, exact / fast);
    std::fflush(stdout);
  }
}

int Main(int argc, char** argv) {
  int cpu_steps = 8, cuda_steps = 100;
  bool fused_only = false, same_bits_only = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--cpu-steps") == 0) cpu_steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--cuda-steps") == 0) cuda_steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--fused-only") == 0) fused_only = std::atoi(argv[i + 1]) != 0;
    if (std::strcmp(argv[i], "--same-bits-only") == 0) {
      same_bits_only = std::atoi(argv[i + 1]) != 0;
    }
  }
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "gpu_decode_bench: no CUDA device (or LibTorch without CUDA)\n");
    return 1;
  }
  torch::NoGradGuard no_grad;
  const models::LoadedModel model = bench::BenchModel(bench::BenchConfig(1024));
  const torch::Device cuda(torch::kCUDA, 0);
  const double copy_bandwidth = bench::DeviceCopyBandwidth();
  const int64_t weight_bytes = WeightBytes(*model.lm);
  std::printf("## Recurrent decoding, bench model, CUDA vs CPU\n\n");
  std::printf(
      "device copy bandwidth (read + write): %.0f GB/s; weights: %.1f MB (fp32); "
      "CPU threads: %d\n\n",
      copy_bandwidth / 1e9, weight_bytes / 1e6, torch::get_num_threads());
  if (fused_only) {
    FusedStepTable(cuda, model, cuda_steps, copy_bandwidth);
    return 0;
  }
  if (same_bits_only) {
    SameBitsTable(cuda, cuda_steps);
    return 0;
  }
  std::printf(
      "| B | CPU tokens/s | CUDA eager tokens/s | CUDA graphs tokens/s | graphs / CPU | graphs / "
      "eager | CUDA step (ms) | bytes read / step (MB) | achieved GB/s | of copy bandwidth | "
      "graphs, row-block step kernel tokens/s | graphs, vector step kernel tokens/s | vector / "
      "row-block | graphs, cluster step kernel tokens/s | cluster / row-block |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t batch : {1, 64, 256}) {
    const StepTiming cpu = TimeSteps(torch::kCPU, batch, cpu_steps, false);
    const StepTiming eager = TimeSteps(cuda, batch, cuda_steps, false);
    // The default (kByShape) and each CUDA decode-step kernel forced (the
    // graphs capture the kernel selected when the decoder is made).
    const StepTiming gpu = TimeSteps(cuda, batch, cuda_steps, true);
    auto forced = [&](kernels::CudaStepKernel kernel) {
      const kernels::ScopedCudaStepKernel selected(kernel);
      return TimeSteps(cuda, batch, cuda_steps, true);
    };
    const StepTiming rows = forced(kernels::CudaStepKernel::kRowBlocks);
    const StepTiming vector = forced(kernels::CudaStepKernel::kVectorSplit);
    const StepTiming cluster = forced(kernels::CudaStepKernel::kClusterSplit);
    const double bytes = static_cast<double>(weight_bytes) +
                         static_cast<double>(batch * gpu.state_bytes_per_sequence);
    const double achieved = bytes / gpu.seconds_per_step;
    std::printf(
        "| %ld | %.0f | %.0f | %.0f | %.1fx | %.1fx | %.3f | %.1f | %.0f | %.1f%% | %.0f | %.0f | "
        "%.2fx | %.0f | %.2fx |\n",
        static_cast<long>(batch), batch / cpu.seconds_per_step, batch / eager.seconds_per_step,
        batch / gpu.seconds_per_step, cpu.seconds_per_step / gpu.seconds_per_step,
        eager.seconds_per_step / gpu.seconds_per_step, gpu.seconds_per_step * 1e3, bytes / 1e6,
        achieved / 1e9, 100.0 * achieved / copy_bandwidth, batch / rows.seconds_per_step,
        batch / vector.seconds_per_step, rows.seconds_per_step / vector.seconds_per_step,
        batch / cluster.seconds_per_step, rows.seconds_per_step / cluster.seconds_per_step);
    std::fflush(stdout);
  }
  FusedStepTable(cuda, model, cuda_steps, copy_bandwidth);
  std::printf(
      "\n## Prompt prefill in chunks of 512 (Prefill + Extend), bench model, CUDA vs CPU\n\n"
      "| prompt tokens | CPU tokens/s | CUDA tokens/s | CUDA / CPU |\n|---|---|---|---|\n");
  for (int64_t length : {1024, 4096, 16384}) {
    const double cpu = PrefillSeconds(torch::kCPU, length);
    const double gpu = PrefillSeconds(cuda, length);
    std::printf("| %ld | %.0f | %.0f | %.1fx |\n", static_cast<long>(length), length / cpu,
                length / gpu, cpu / gpu);
    std::fflush(stdout);
  }
  SameBitsTable(cuda, cuda_steps);
  return 0;
}

}  // namespace
}  // namespace performer

int main(int argc, char** argv) {
  try {
    return performer::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_decode_bench: %s\n", e.what());
    return 1;
  }
}
