// What a training run reports while it runs (see Trainer::Run): one
// StepReport per optimizer step, the validation loss when it is measured,
// and the checkpoints written.
#pragma once

#include <cstdint>
#include <string>

namespace performer::training {

struct StepReport {
  int64_t step = 0;         // 1-based: updates done after this step
  int64_t total_steps = 0;  // of the run
  double loss = 0.0;        // mean cross-entropy (nats per token) of the batch
  double lr = 0.0;          // learning rate of this update
  double grad_norm = 0.0;   // global gradient L2 norm before clipping
  bool redrew = false;      // projection matrices redrawn before this step's forward
  int64_t tokens = 0;       // target tokens in the batch
  double seconds = 0.0;     // wall time of the step
};

class TrainObserver {
 public:
  virtual ~TrainObserver() = default;
  virtual void OnStep(const StepReport& report) = 0;
  // Mean cross-entropy over the validation windows after `step` updates.
  virtual void OnValidation(int64_t step, double loss) = 0;
  virtual void OnCheckpoint(int64_t step, const std::string& path) = 0;
};

}  // namespace performer::training
