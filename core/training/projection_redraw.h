// performer-pytorch's ProjectionUpdater for training
// (docs/reference/performer-pytorch.md §7): before every training-mode forward
// of a Performer, if feature_redraw_interval is set and
// calls_since_last_redraw >= feature_redraw_interval, every projection matrix
// of the model is redrawn and the counter reset to 0; otherwise the counter is
// incremented. So with interval k the matrices are redrawn before forwards
// k + 1, 2k + 2, ... (every k + 1 training forwards). Evaluation forwards do
// not count. Without an interval (the reference's fix_projection_matrices_(),
// or auto_check_redraw = False) nothing is ever redrawn. The draws come from
// the default generator.
//
// The model itself never redraws: a served model keeps the matrices of its
// weights.
#pragma once

#include <cstdint>
#include <optional>

namespace torch::nn {
class Module;
}  // namespace torch::nn

namespace performer::training {

class ProjectionRedraw {
 public:
  explicit ProjectionRedraw(std::optional<int64_t> interval) : interval_(interval) {}

  // Call before each training forward of `model`; true when it redrew.
  bool BeforeTrainingForward(torch::nn::Module& model);

  // No more redraws (fix_projection_matrices_()).
  void Fix() { interval_.reset(); }

  const std::optional<int64_t>& interval() const { return interval_; }
  int64_t calls_since_last_redraw() const { return calls_since_last_redraw_; }
  void set_calls_since_last_redraw(int64_t calls) { calls_since_last_redraw_ = calls; }

 private:
  std::optional<int64_t> interval_;
  int64_t calls_since_last_redraw_ = 0;
};

}  // namespace performer::training
