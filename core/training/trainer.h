// Trains a causal PerformerLM (core/models) on a byte-level TextDataset with
// LibTorch autograd, the way performer-pytorch's examples train one:
//
//   - next-token cross-entropy on batch_size random windows of seq_len + 1
//     tokens (WindowSampler; inputs are the first seq_len, targets the last);
//   - AdamW (torch::optim::AdamW) with weight decay on parameters of two or
//     more dimensions (linear weights, embeddings) and none on biases, norms
//     and gains; the LrSchedule (warm-up + cosine) sets each update's rate;
//   - the global gradient norm clipped to clip_norm;
//   - dropout (emb/ff/attn_dropout of the config) in training mode, and
//     ProjectionRedraw before every training forward (feature_redraw_interval,
//     auto_check_redraw);
//   - the validation loss every val_every steps and at the end, in eval mode
//     (no dropout, no redraw count);
//   - checkpoints (checkpoint.h) from which Resume continues the loss curve
//     of the uninterrupted run exactly;
//   - Export: a model folder in the serving format (config.json,
//     weights.safetensors, tokenizer.json {"type": "byte"}) whose projection
//     matrices are the current ones, fixed (a loaded model never redraws).
//
// Randomness: the initial weights, dropout and redraws come from LibTorch's
// default generator, the data order from the sampler's own. The run keeps its
// own default-generator state and swaps it in for each step (and out after),
// so the process's default generator is left as it was and two trainers in
// one process do not disturb each other.
#pragma once

#include <torch/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/models/model_folder.h"
#include "core/models/performer_lm.h"
#include "core/training/projection_redraw.h"
#include "core/training/text_dataset.h"
#include "core/training/train_observer.h"
#include "core/training/train_options.h"
#include "core/training/window_sampler.h"

namespace torch::optim {
class AdamW;
}  // namespace torch::optim

namespace performer::training {

// The byte-level tokenizer.json a trained folder gets.
nlohmann::json ByteTokenizerJson();

class Trainer {
 public:
  // A fresh run. `model_config`: PerformerLM keywords (config.json
  // contents; model_class is set); it must be causal with num_tokens 256 (the
  // byte vocabulary) and max_seq_len >= seq_len. The training part of `data`
  // must hold a window (seq_len + 1 tokens).
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(nlohmann::json model_config,
                                                         const TrainOptions& options,
                                                         TextDataset data);
  // Continues the run of a checkpoint file on the same data (fingerprint
  // checked); `options` must pass CheckResumable against the stored ones.
  static absl::StatusOr<std::unique_ptr<Trainer>> Resume(const std::string& checkpoint,
                                                         const TrainOptions& options,
                                                         TextDataset data);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer update.
  StepReport Step();
  // Mean cross-entropy over the validation windows; NaN when there are none.
  double ValidationLoss();
  // Steps until options().steps, reporting to `observer` (may be null), with
  // validation and checkpoints at their cadence. Stops with an error on a
  // non-finite loss or a failed checkpoint.
  absl::Status Run(TrainObserver* observer);

  absl::Status SaveCheckpoint(const std::string& path) const;
  // Writes the serving folder (see above) and returns it as loaded back.
  absl::StatusOr<models::LoadedModel> Export(const std::string& dir,
                                             torch::ScalarType dtype = torch::kFloat) const;

  int64_t step() const { return step_; }
  const TrainOptions& options() const { return options_; }
  const nlohmann::json& model_config() const { return model_config_; }
  const TextDataset& data() const { return data_; }
  const ProjectionRedraw& redraw() const { return redraw_; }
  // The model being trained (training mode between steps).
  models::PerformerLM& model() { return model_; }

 private:
  Trainer(nlohmann::json model_config, const models::PerformerLMConfig& config,
          const TrainOptions& options, TextDataset data);
  static absl::StatusOr<models::PerformerLMConfig> CheckSetup(nlohmann::json& model_config,
                                                              const TrainOptions& options,
                                                              const TextDataset& data);

  nlohmann::json model_config_;
  TrainOptions options_;
  TextDataset data_;
  models::PerformerLM model_{nullptr};
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  ProjectionRedraw redraw_;
  WindowSampler sampler_;
  torch::Tensor rng_state_;  // the run's default-generator state between steps
  int64_t step_ = 0;
};

}  // namespace performer::training
