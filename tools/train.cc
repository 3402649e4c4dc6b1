// performer-train: trains a byte-level PerformerLM on text files and writes
// a model folder in the serving format (config.json, weights.safetensors,
// tokenizer.json {"type": "byte"}). See core/training/trainer.h for what a
// step does; checkpoints go to <out>/checkpoints and --resume continues a
// run exactly where it stopped.
//
//   performer-train --corpus=a.txt,b.txt --out=models/my-lm [--steps=2000]
//       [--dim=256 --depth=4 --heads=8 ...] [--resume=models/my-lm/checkpoints]
//
// SentencePiece is not supported: tokenising needs the SentencePiece plugin
// of the server, which the core library does not link.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/runtime/torch_runtime.h"
#include "core/training/checkpoint.h"
#include "core/training/progress_meter.h"
#include "core/training/trainer.h"

ABSL_FLAG(std::vector<std::string>, corpus, {},
          "Training text file(s), comma-separated; their bytes are concatenated.");
ABSL_FLAG(std::string, out, "", "Output model folder (created).");
ABSL_FLAG(std::string, resume, "",
          "Checkpoint file, or a folder whose latest step-*.pt is taken. The model and the "
          "options that shape the loss curve come from it; --corpus and --val_fraction must "
          "be the ones of the run.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Where checkpoints go (default <out>/checkpoints).");
ABSL_FLAG(int32_t, threads, 0, "LibTorch intra-op threads (0: every CPU).");
ABSL_FLAG(std::string, dtype, "fp32", "Weights of the exported folder: fp32, fp16 or bf16.");
ABSL_FLAG(int64_t, log_every, 10, "Progress line every N steps when stderr is not a terminal.");
ABSL_FLAG(double, val_fraction, 0.05, "Tail of the corpus held out for the validation loss.");

// The model: a base config.json and overrides of its keywords.
ABSL_FLAG(std::string, config, "",
          "Base config.json of the PerformerLM (default: a tiny shape: dim 128, depth 2, 4 heads "
          "of 32, one local).");
ABSL_FLAG(std::optional<int64_t>, dim, std::nullopt, "Model width.");
ABSL_FLAG(std::optional<int64_t>, depth, std::nullopt, "Layers.");
ABSL_FLAG(std::optional<int64_t>, heads, std::nullopt, "Attention heads per layer.");
ABSL_FLAG(std::optional<int64_t>, dim_head, std::nullopt, "Width of a head.");
ABSL_FLAG(std::optional<int64_t>, nb_features, std::nullopt, "Random features of FAVOR+ heads.");
ABSL_FLAG(std::optional<int64_t>, local_attn_heads, std::nullopt, "Local heads per layer.");
ABSL_FLAG(std::optional<int64_t>, local_window_size, std::nullopt, "Window of local heads.");
ABSL_FLAG(std::optional<int64_t>, max_seq_len, std::nullopt, "Longest sequence of the model.");
ABSL_FLAG(std::optional<int64_t>, ff_mult, std::nullopt, "Feed-forward width multiplier.");
ABSL_FLAG(std::optional<int64_t>, feature_redraw_interval, std::nullopt,
          "Redraw the projection matrices every N + 1 training forwards.");
ABSL_FLAG(std::optional<double>, emb_dropout, std::nullopt, "Dropout after the embeddings.");
ABSL_FLAG(std::optional<double>, ff_dropout, std::nullopt, "Dropout in the feed-forwards.");
ABSL_FLAG(std::optional<double>, attn_dropout, std::nullopt, "Dropout in the attention.");

// Training (defaults: core/training/train_options.h, or the checkpoint's).
ABSL_FLAG(std::optional<int64_t>, steps, std::nullopt, "Optimizer updates of the whole run.");
ABSL_FLAG(std::optional<int64_t>, batch_size, std::nullopt, "Windows per update.");
ABSL_FLAG(std::optional<int64_t>, seq_len, std::nullopt, "Tokens per training window.");
ABSL_FLAG(std::optional<double>, lr, std::nullopt, "Peak learning rate (AdamW).");
ABSL_FLAG(std::optional<double>, min_lr_ratio, std::nullopt, "Cosine floor as a fraction of lr.");
ABSL_FLAG(std::optional<int64_t>, warmup_steps, std::nullopt, "Linear warm-up steps.");
ABSL_FLAG(std::optional<double>, weight_decay, std::nullopt, "AdamW decay of weight matrices.");
ABSL_FLAG(std::optional<double>, clip_norm, std::nullopt, "Gradient norm limit (<= 0: none).");
ABSL_FLAG(std::optional<int64_t>, val_every, std::nullopt, "Validation every N steps (0: never).");
ABSL_FLAG(std::optional<int64_t>, val_windows, std::nullopt, "Validation windows (at most).");
ABSL_FLAG(std::optional<int64_t>, checkpoint_every, std::nullopt,
          "Checkpoint every N steps and at the end (0: never).");
ABSL_FLAG(std::optional<uint64_t>, seed, std::nullopt, "Seed of weights, dropout, data order.");

namespace {

using performer::training::TrainOptions;

// A tiny default shape (dim 128, depth 2, 4 heads of 32, one local head);
// unset keywords take the reference's defaults.
nlohmann::json DefaultModelConfig() {
  return {{"num_tokens", 256},
          {"max_seq_len", 2048},
          {"dim", 128},
          {"depth", 2},
          {"heads", 4},
          {"dim_head", 32},
          {"nb_features", 64},
          {"causal", true},
          {"local_attn_heads", 1},
          {"local_window_size", 64}};
}

template <typename T>
bool Override(const absl::Flag<std::optional<T>>& flag, const char* key, nlohmann::json& json) {
  std::optional<T> value = absl::GetFlag(flag);
  if (!value.has_value()) return false;
  json[key] = *value;
  return true;
}

// Model keywords given on the command line, into `config`; their names.
std::vector<std::string> ApplyModelFlags(nlohmann::json& config) {
  std::vector<std::string> set;
  auto apply = [&](const auto& flag, const char* key) {
    if (Override(flag, key, config)) set.push_back(key);
  };
  apply(FLAGS_dim, "dim");
  apply(FLAGS_depth, "depth");
  apply(FLAGS_heads, "heads");
  apply(FLAGS_dim_head, "dim_head");
  apply(FLAGS_nb_features, "nb_features");
  apply(FLAGS_local_attn_heads, "local_attn_heads");
  apply(FLAGS_local_window_size, "local_window_size");
  apply(FLAGS_max_seq_len, "max_seq_len");
  apply(FLAGS_ff_mult, "ff_mult");
  apply(FLAGS_feature_redraw_interval, "feature_redraw_interval");
  apply(FLAGS_emb_dropout, "emb_dropout");
  apply(FLAGS_ff_dropout, "ff_dropout");
  apply(FLAGS_attn_dropout, "attn_dropout");
  return set;
}

template <typename T, typename U>
void Take(const absl::Flag<std::optional<T>>& flag, U& field) {
  if (std::optional<T> value = absl::GetFlag(flag)) field = static_cast<U>(*value);
}

void ApplyTrainFlags(TrainOptions& o) {
  Take(FLAGS_steps, o.steps);
  Take(FLAGS_batch_size, o.batch_size);
  Take(FLAGS_seq_len, o.seq_len);
  Take(FLAGS_lr, o.lr);
  Take(FLAGS_min_lr_ratio, o.min_lr_ratio);
  Take(FLAGS_warmup_steps, o.warmup_steps);
  Take(FLAGS_weight_decay, o.weight_decay);
  Take(FLAGS_clip_norm, o.clip_norm);
  Take(FLAGS_val_every, o.val_every);
  Take(FLAGS_val_windows, o.val_windows);
  Take(FLAGS_checkpoint_every, o.checkpoint_every);
  Take(FLAGS_seed, o.seed);
}

std::optional<torch::ScalarType> ParseDtype(const std::string& name) {
  if (name == "fp32") return torch::kFloat;
  if (name == "fp16") return torch::kHalf;
  if (name == "bf16") return torch::kBFloat16;
  return std::nullopt;
}

int Fail(const std::string& message, int code = 1) {
  std::cerr << "performer-train: " << message << "\n";
  return code;
}

// The whole run, after the flags are parsed.
int Train() {
  const std::vector<std::string> corpus = absl::GetFlag(FLAGS_corpus);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (corpus.empty() || out.empty()) return Fail("--corpus and --out are required", 2);
  const std::optional<torch::ScalarType> dtype = ParseDtype(absl::GetFlag(FLAGS_dtype));
  if (!dtype) return Fail("--dtype must be fp32, fp16 or bf16", 2);

  const performer::TorchRuntimeInfo runtime =
      performer::ConfigureTorchRuntime(absl::GetFlag(FLAGS_threads));
  std::cerr << performer::DescribeTorchRuntime(runtime) << "\n";

  absl::StatusOr<performer::training::TextDataset> data =
      performer::training::TextDataset::FromFiles(corpus, absl::GetFlag(FLAGS_val_fraction));
  if (!data.ok()) return Fail(data.status().ToString(), 2);

  TrainOptions options;
  std::string resume_from;
  nlohmann::json model_config;
  if (!absl::GetFlag(FLAGS_resume).empty()) {
    absl::StatusOr<std::string> path =
        performer::training::ResolveCheckpoint(absl::GetFlag(FLAGS_resume));
    if (!path.ok()) return Fail(path.status().ToString(), 2);
    resume_from = *path;
    absl::StatusOr<performer::training::TrainingState> state =
        performer::training::ReadTrainingState(resume_from);
    if (!state.ok()) return Fail(state.status().ToString(), 2);
    absl::StatusOr<TrainOptions> stored = TrainOptions::FromJson(state->options);
    if (!stored.ok()) return Fail(stored.status().ToString(), 2);
    options = *stored;
    nlohmann::json ignored;
    const std::vector<std::string> model_flags = ApplyModelFlags(ignored);
    if (!model_flags.empty() || !absl::GetFlag(FLAGS_config).empty()) {
      return Fail(absl::StrCat("--resume takes the model from the checkpoint; drop --config and --",
                               absl::StrJoin(model_flags, ", --")),
                  2);
    }
  } else {
    model_config = DefaultModelConfig();
    if (const std::string path = absl::GetFlag(FLAGS_config); !path.empty()) {
      std::ifstream in(path);
      model_config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (model_config.is_discarded() || !model_config.is_object()) {
        return Fail(absl::StrCat(path, ": not a JSON object"), 2);
      }
    }
    ApplyModelFlags(model_config);
    options.checkpoint_dir = (std::filesystem::path(out) / "checkpoints").string();
  }
  ApplyTrainFlags(options);
  if (!absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  }

  const int64_t train_tokens = data->train().size(0), val_tokens = data->validation().size(0);
  absl::StatusOr<std::unique_ptr<performer::training::Trainer>> trainer =
      resume_from.empty()
          ? performer::training::Trainer::Create(model_config, options, *std::move(data))
          : performer::training::Trainer::Resume(resume_from, options, *std::move(data));
  if (!trainer.ok()) return Fail(trainer.status().ToString(), 2);
  int64_t parameters = 0;
  for (const torch::Tensor& p : (*trainer)->model()->parameters()) parameters += p.numel();
  std::cerr << "model " << (*trainer)->model_config().dump() << "\n"
            << parameters << " parameters; corpus " << train_tokens << " training and "
            << val_tokens << " validation bytes; "
            << (resume_from.empty()
                    ? std::string("from scratch")
                    : absl::StrCat("resuming ", resume_from, " at step ", (*trainer)->step()))
            << "\n";

  performer::training::ProgressMeter meter(std::cerr, ::isatty(STDERR_FILENO) != 0,
                                           absl::GetFlag(FLAGS_log_every));
  absl::Status run = (*trainer)->Run(&meter);
  meter.Finish();
  if (!run.ok()) return Fail(run.ToString());
  absl::StatusOr<performer::models::LoadedModel> exported = (*trainer)->Export(out, *dtype);
  if (!exported.ok()) return Fail(exported.status().ToString());
  std::cerr << "wrote " << out << " (step " << (*trainer)->step() << ", "
            << absl::GetFlag(FLAGS_dtype) << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "performer-train --corpus=FILE[,FILE...] --out=DIR [flags]: trains a byte-level "
      "PerformerLM and writes a model folder the server loads.");
  absl::ParseCommandLine(argc, argv);
  try {
    return Train();
  } catch (const std::exception& e) {  // LibTorch and the standard library report by exception
    return Fail(e.what());
  }
}
