#include "core/training/progress_meter.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace performer::training {

std::string FormatDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
}

std::string FormatCount(double value) {
  if (value < 1e3) return absl::StrFormat("%.0f", value);
  if (value < 1e6) return absl::StrFormat("%.1fk", value / 1e3);
  return absl::StrFormat("%.2fM", value / 1e6);
}

ProgressMeter::ProgressMeter(std::ostream& out, bool terminal, int64_t every)
    : out_(out), terminal_(terminal), every_(std::max<int64_t>(1, every)) {}

std::string ProgressMeter::Line(const StepReport& report, double loss) const {
  std::string line =
      absl::StrFormat("step %d/%d | loss %.4f", report.step, report.total_steps, loss);
  if (val_loss_.has_value()) absl::StrAppendFormat(&line, " | val %.4f", *val_loss_);
  absl::StrAppendFormat(&line, " | lr %.2e", report.lr);
  if (session_seconds_ > 0.0) {
    const double per_step = session_seconds_ / static_cast<double>(session_steps_);
    absl::StrAppendFormat(
        &line, " | %s tok/s | ETA %s",
        FormatCount(static_cast<double>(session_tokens_) / session_seconds_),
        FormatDuration(per_step * static_cast<double>(report.total_steps - report.step)));
  }
  return line;
}

void ProgressMeter::Print(const std::string& line) {
  if (terminal_) {
    out_ << "\r\033[K" << line << std::flush;  // \033[K clears what a longer line left
    line_open_ = true;
  } else {
    out_ << line << "\n" << std::flush;
  }
}

void ProgressMeter::OnStep(const StepReport& report) {
  loss_sum_ += report.loss;
  ++loss_count_;
  session_seconds_ += report.seconds;
  ++session_steps_;
  session_tokens_ += report.tokens;
  if (!terminal_ && report.step % every_ != 0 && report.step != report.total_steps) return;
  Print(Line(report, loss_sum_ / static_cast<double>(loss_count_)));
  loss_sum_ = 0.0;
  loss_count_ = 0;
}

void ProgressMeter::OnValidation(int64_t step, double loss) {
  val_loss_ = loss;
  Finish();
  out_ << absl::StrFormat("step %d: validation loss %.4f (%.3f bits/byte)\n", step, loss,
                          loss / std::log(2.0))
       << std::flush;
}

void ProgressMeter::OnCheckpoint(int64_t step, const std::string& path) {
  Finish();
  out_ << absl::StrFormat("step %d: checkpoint %s\n", step, path) << std::flush;
}

void ProgressMeter::Finish() {
  if (!line_open_) return;
  out_ << "\n" << std::flush;
  line_open_ = false;
}

}  // namespace performer::training
