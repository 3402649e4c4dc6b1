// The progress display of a training run on a stream (stderr):
//
//   step 120/1000 | loss 2.3412 | val 2.4101 | lr 9.80e-04 | 12.3k tok/s | ETA 1m23s
//
// loss is the mean over the steps since the previous line, val the latest
// validation loss, tok/s and ETA come from the mean step time of this
// session. On a terminal the line is redrawn in place ('\r') after every
// step; elsewhere (a log file, a pipe) one line is written every `every`
// steps and at the last. Validation results and checkpoints get lines of
// their own.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "core/training/train_observer.h"

namespace performer::training {

// "42s", "3m05s", "2h03m".
std::string FormatDuration(double seconds);
// "850", "12.3k", "1.25M".
std::string FormatCount(double value);

class ProgressMeter : public TrainObserver {
 public:
  ProgressMeter(std::ostream& out, bool terminal, int64_t every);

  void OnStep(const StepReport& report) override;
  void OnValidation(int64_t step, double loss) override;
  void OnCheckpoint(int64_t step, const std::string& path) override;
  // Ends a line left open on a terminal.
  void Finish();

 private:
  std::string Line(const StepReport& report, double loss) const;
  void Print(const std::string& line);

  std::ostream& out_;
  bool terminal_;
  int64_t every_;
  bool line_open_ = false;
  double loss_sum_ = 0.0;
  int64_t loss_count_ = 0;
  double session_seconds_ = 0.0;
  int64_t session_steps_ = 0;
  int64_t session_tokens_ = 0;
  std::optional<double> val_loss_;
};

}  // namespace performer::training
