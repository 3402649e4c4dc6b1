#include "core/recurrent/state_snapshot.h"

namespace performer {

int64_t StateSnapshot::bytes() const {
  int64_t total = static_cast<int64_t>(sizeof(position));
  for (const std::vector<torch::Tensor>& tensors : layers) {
    for (const torch::Tensor& t : tensors) {
      total += t.numel() * static_cast<int64_t>(t.element_size());
    }
  }
  return total;
}

}  // namespace performer
