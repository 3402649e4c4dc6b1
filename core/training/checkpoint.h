// Training checkpoints: one file (a torch::serialize archive) holding the
// model's parameters and buffers (projection matrices included), the
// optimizer's state, and the run's TrainingState (step, redraw counter,
// generator states, data position, the model config and train options),
// everything a resumed run needs to continue the uninterrupted run's loss
// curve exactly. Files are written to a temporary name and renamed, so a
// crash never leaves a truncated checkpoint under the final name.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace torch::nn {
class Module;
}  // namespace torch::nn
namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace performer::training {

struct TrainingState {
  int64_t step = 0;                     // updates done
  nlohmann::json model_config;          // config.json of the model (model_class included)
  nlohmann::json options;               // TrainOptions::ToJson()
  uint64_t data_fingerprint = 0;        // TextDataset::fingerprint()
  int64_t calls_since_last_redraw = 0;  // ProjectionRedraw
  torch::Tensor rng_state;              // the run's default-generator state
  torch::Tensor sampler_state;          // WindowSampler generator state
  int64_t sampler_batches = 0;          // WindowSampler::batches_drawn()
};

absl::Status SaveCheckpoint(const std::string& path, const TrainingState& state,
                            const torch::nn::Module& model,
                            const torch::optim::Optimizer& optimizer);

// The state only (model and optimizer left in the file).
absl::StatusOr<TrainingState> ReadTrainingState(const std::string& path);

// Loads the model's tensors and the optimizer's state (which must have been
// built with the same parameters and groups) and returns the state.
absl::StatusOr<TrainingState> LoadCheckpoint(const std::string& path, torch::nn::Module& model,
                                             torch::optim::Optimizer& optimizer);

// <dir>/step-<step, 8 digits>.pt
std::string CheckpointPath(const std::string& dir, int64_t step);
// `path` itself when it is a file; for a folder, its checkpoint with the
// highest step (NotFound when it has none).
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& path);

}  // namespace performer::training
