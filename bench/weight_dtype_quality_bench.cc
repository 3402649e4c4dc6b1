// What the decode weight dtype (core/models/decode_step_options.h) costs in
// quality, on a served model folder (default: the repository's default
// model), on the CPU or a GPU:
//
//   * greedy-token agreement with float32: 64 prompts of 16 bytes (windows
//     of --prompt_text, default models/README.md) decoded greedily for 128
//     tokens by the separate-ops float32 step and by the fused step in each
//     dtype; the share of the 64 x 128 tokens that equal float32's, and how
//     many of the 64 continuations are identical (on a GPU also the paths
//     that are off by default: the FAVOR+ projection in the state kernel,
//     the tensor-core bf16 projections);
//   * with --validation=FILE (text; the held-out tail of docs/training.md's
//     corpus): bits per byte of the first --validation_bytes bytes, fed
//     through the decode step with teacher forcing (each byte's logits from
//     the step before it; windows of the model's max_seq_len), for each
//     dtype.
//
// Usage: weight_dtype_quality_bench [--device=cpu|cuda] [--model=DIR]
//        [--prompt_text=FILE] [--validation=FILE] [--validation_bytes=N]
// Prints Markdown tables.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/bench_model.h"
#include "core/decoding/performer_decoder.h"
#include "core/models/decode_step_options.h"
#include "core/models/model_folder.h"
#include "kernels/fused_linear.h"

ABSL_FLAG(std::string, device, "cpu", "cpu or cuda");
ABSL_FLAG(std::string, model, "models/performer-fortunes", "model folder (byte tokenizer)");
ABSL_FLAG(std::string, prompt_text, "models/README.md", "text the 64 prompts are cut from");
ABSL_FLAG(std::string, validation, "", "held-out text for bits per byte (optional)");
ABSL_FLAG(int64_t, validation_bytes, 16384, "bytes of --validation to score");

namespace performer {
namespace {

constexpr int64_t kPrompts = 64;
constexpr int64_t kPromptBytes = 16;
constexpr int64_t kNewTokens = 128;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::unique_ptr<decoding::PerformerDecoder> MakeDecoder(const models::DecodeStepOptions& step,
                                                        int64_t capacity) {
  absl::StatusOr<models::LoadedModel> model = models::LoadModelFolder(absl::GetFlag(FLAGS_model));
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
    std::exit(1);
  }
  model->MoveTo(torch::Device(absl::GetFlag(FLAGS_device)));
  decoding::PerformerDecoderOptions options;
  options.step = step;
  absl::StatusOr<std::unique_ptr<decoding::PerformerDecoder>> d =
      decoding::PerformerDecoder::Create(*std::move(model), capacity, options);
  if (!d.ok()) {
    std::fprintf(stderr, "%s\n", std::string(d.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(d);
}

template <typename T>
T OrDie(absl::StatusOr<T> v) {
  if (!v.ok()) {
    std::fprintf(stderr, "%s\n", std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(v);
}

// kPrompts greedy continuations of kNewTokens tokens, [prompt][token].
std::vector<std::vector<int64_t>> Greedy(const models::DecodeStepOptions& step,
                                         const std::string& text) {
  auto decoder = MakeDecoder(step, kPrompts);
  std::vector<decoding::SequenceId> ids;
  std::vector<int64_t> next;
  const int64_t stride = (static_cast<int64_t>(text.size()) - kPromptBytes) / kPrompts;
  for (int64_t p = 0; p < kPrompts; ++p) {
    std::vector<int64_t> prompt;
    for (int64_t i = 0; i < kPromptBytes; ++i) {
      prompt.push_back(static_cast<unsigned char>(text[static_cast<size_t>(p * stride + i)]));
    }
    ids.push_back(OrDie(decoder->Create()));
    next.push_back(OrDie(decoder->Prefill(ids.back(), {prompt, {}, {}})).argmax().item<int64_t>());
  }
  std::vector<std::vector<int64_t>> out(kPrompts);
  for (int64_t t = 0; t < kNewTokens; ++t) {
    for (int64_t p = 0; p < kPrompts; ++p)
      out[static_cast<size_t>(p)].push_back(next[static_cast<size_t>(p)]);
    if (t + 1 == kNewTokens) break;
    const torch::Tensor logits = OrDie(decoder->Step(ids, next));
    const torch::Tensor best = logits.argmax(-1);
    for (int64_t p = 0; p < kPrompts; ++p) next[static_cast<size_t>(p)] = best[p].item<int64_t>();
  }
  return out;
}

// Bits per byte of `text` through the decode step (teacher forcing), in
// windows of the model's max_seq_len, each a sequence of its own (its first
// byte is not scored).
double BitsPerByte(const models::DecodeStepOptions& step, const std::string& text) {
  auto decoder = MakeDecoder(step, 1);
  const auto window = static_cast<size_t>(decoder->info().max_seq_len);
  double nats = 0;
  size_t scored = 0;
  for (size_t begin = 0; begin + 1 < text.size(); begin += window) {
    const size_t end = std::min(text.size(), begin + window);
    const decoding::SequenceId id = OrDie(decoder->Create());
    torch::Tensor logits =
        OrDie(decoder->Prefill(id, {{static_cast<unsigned char>(text[begin])}, {}, {}}));
    for (size_t i = begin + 1; i < end; ++i) {
      const int64_t byte = static_cast<unsigned char>(text[i]);
      nats -= torch::log_softmax(logits.to(torch::kDouble), -1)[byte].item<double>();
      ++scored;
      if (i + 1 < end) logits = OrDie(decoder->Step({id}, {byte}))[0];
    }
    if (!decoder->Release(id).ok()) std::exit(1);
  }
  return nats / std::log(2.0) / static_cast<double>(scored);
}

int Main() {
  torch::NoGradGuard no_grad;
  const std::string text = ReadFile(absl::GetFlag(FLAGS_prompt_text));
  std::printf("## Decode weight dtype quality: %s on %s\n\n", absl::GetFlag(FLAGS_model).c_str(),
              absl::GetFlag(FLAGS_device).c_str());
  std::printf(
      "| step | greedy tokens equal to fp32 (of %ld) | identical continuations (of %ld) |\n"
      "|---|---|---|\n",
      static_cast<long>(kPrompts * kNewTokens), static_cast<long>(kPrompts));
  const std::vector<bench::DecodeStepVariant> variants = bench::DecodeStepVariants();
  const auto reference = Greedy(variants[0].step, text);
  const bool on_cuda = torch::Device(absl::GetFlag(FLAGS_device)).is_cuda();
  auto runs_here = [&](const bench::DecodeStepVariant& v) {
    return !(on_cuda && v.step.weight_dtype == models::WeightDtype::kInt8);  // CPU only
  };
  auto agreement_row = [&](const char* name, const std::vector<std::vector<int64_t>>& got) {
    int64_t equal = 0, identical = 0;
    for (size_t p = 0; p < got.size(); ++p) {
      for (size_t t = 0; t < got[p].size(); ++t) equal += got[p][t] == reference[p][t] ? 1 : 0;
      identical += got[p] == reference[p] ? 1 : 0;
    }
    std::printf("| %s | %.2f%% | %ld |\n", name,
                100.0 * static_cast<double>(equal) / static_cast<double>(kPrompts * kNewTokens),
                static_cast<long>(identical));
  };
  for (const bench::DecodeStepVariant& v : variants) {
    if (runs_here(v)) agreement_row(v.name, Greedy(v.step, text));
  }
  if (on_cuda) {
    // The GPU paths that are off by default (docs/gpu.md): the FAVOR+
    // projection in the state kernel, and the tensor-core projections of
    // bf16 weights (the 64 prompts step above the own kernel's 32 rows).
    models::DecodeStepOptions projected = variants[1].step;
    projected.favor_projection_in_step = true;
    agreement_row("fp32, fused, projection in the state kernel", Greedy(projected, text));
    kernels::SetCudaFusedLinearTensorCores(true);
    agreement_row("bf16, fused, tensor cores", Greedy(variants[2].step, text));
    kernels::SetCudaFusedLinearTensorCores(false);
  }
  const std::string validation_path = absl::GetFlag(FLAGS_validation);
  if (!validation_path.empty()) {
    std::string validation = ReadFile(validation_path);
    const auto limit = static_cast<size_t>(absl::GetFlag(FLAGS_validation_bytes));
    if (validation.size() > limit) validation.resize(limit);
    std::printf("\n| step | bits per byte (%zu bytes) | vs fp32 |\n|---|---|---|\n",
                validation.size());
    const double base = BitsPerByte(variants[0].step, validation);
    for (const bench::DecodeStepVariant& v : variants) {
      if (!runs_here(v)) continue;
      const double bits = BitsPerByte(v.step, validation);
      std::printf("| %s | %.4f | %+.3f%% |\n", v.name, bits, 100.0 * (bits - base) / base);
    }
  }
  return 0;
}

}  // namespace
}  // namespace performer

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return performer::Main();
}
