#include "core/training/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace performer::training {

absl::Status LrSchedule::Validate() const {
  if (!(peak_lr > 0.0) || !std::isfinite(peak_lr)) {
    return absl::InvalidArgumentError(absl::StrCat("lr must be positive, got ", peak_lr));
  }
  if (warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("warmup_steps must be >= 0, got ", warmup_steps));
  }
  if (total_steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("steps must be >= 1, got ", total_steps));
  }
  if (!(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_lr_ratio must be in [0, 1], got ", min_lr_ratio));
  }
  return absl::OkStatus();
}

double LrSchedule::At(int64_t step) const {
  const double floor = peak_lr * min_lr_ratio;
  if (step < warmup_steps) {
    return peak_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (step >= total_steps) return floor;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = static_cast<double>(step - warmup_steps) / span;
  return floor + (peak_lr - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace performer::training
