// The options of a training run (performer-train's flags), stored in every
// checkpoint. Those that shape the loss curve (batch, window, optimizer,
// schedule, clipping, seed) must be the same when a run is resumed; steps,
// validation and checkpoint cadence may change (a longer `steps` stretches
// the cosine schedule from the resumed step on).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/training/lr_schedule.h"

namespace performer::training {

struct TrainOptions {
  int64_t steps = 1000;       // optimizer updates in the whole run
  int64_t batch_size = 16;    // windows per update
  int64_t seq_len = 256;      // input tokens per window (windows hold seq_len + 1)
  double lr = 1e-3;           // peak learning rate
  double min_lr_ratio = 0.1;  // cosine floor = lr * min_lr_ratio
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;  // AdamW, on parameters with >= 2 dimensions only
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double clip_norm = 1.0;          // global gradient L2 norm limit; <= 0: no clipping
  int64_t val_every = 100;         // validation loss every N steps and at the end; 0: never
  int64_t val_windows = 32;        // validation windows (at most)
  int64_t checkpoint_every = 500;  // checkpoint every N steps and at the end; 0: never
  std::string checkpoint_dir;      // where checkpoints go (CheckpointPath); empty: nowhere
  uint64_t seed = 0;               // initial weights, dropout, redraws, data order

  absl::Status Validate() const;
  LrSchedule Schedule() const;
  nlohmann::json ToJson() const;
  // Strict: unknown keys and wrong types are InvalidArgument.
  static absl::StatusOr<TrainOptions> FromJson(const nlohmann::json& json);
};

// OK when a run stored with `stored` may go on with `requested`; otherwise
// InvalidArgument naming every option that differs and may not.
absl::Status CheckResumable(const TrainOptions& stored, const TrainOptions& requested);

}  // namespace performer::training
