#include "core/training/projection_redraw.h"

#include "core/models/initialization.h"

namespace performer::training {

bool ProjectionRedraw::BeforeTrainingForward(torch::nn::Module& model) {
  if (interval_.has_value() && calls_since_last_redraw_ >= *interval_) {
    models::RedrawProjectionMatrices(model);
    calls_since_last_redraw_ = 0;
    return true;
  }
  ++calls_since_last_redraw_;
  return false;
}

}  // namespace performer::training
