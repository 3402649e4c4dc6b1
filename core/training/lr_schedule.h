// The learning-rate schedule of the trainer: linear warm-up, then a cosine
// decay to a floor. For the 0-based optimizer step s (the update that s
// earlier updates precede):
//
//   s < warmup:          peak * (s + 1) / warmup
//   warmup <= s < total: floor + (peak - floor) * (1 + cos(pi * p)) / 2,
//                        p = (s - warmup) / (total - warmup)
//   s >= total:          floor
//
// with floor = peak * min_lr_ratio. The first update after warm-up uses the
// peak rate; the rate falls towards the floor over the remaining steps.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace performer::training {

struct LrSchedule {
  double peak_lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.1;

  // peak_lr > 0, warmup_steps >= 0, total_steps >= 1, min_lr_ratio in [0, 1].
  absl::Status Validate() const;
  double At(int64_t step) const;
};

}  // namespace performer::training
