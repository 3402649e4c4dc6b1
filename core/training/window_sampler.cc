#include "core/training/window_sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

namespace performer::training {

WindowSampler::WindowSampler(torch::Tensor tokens, uint64_t seed)
    : tokens_(std::move(tokens)), generator_(at::make_generator<at::CPUGeneratorImpl>(seed)) {}

torch::Tensor WindowSampler::Next(int64_t batch, int64_t length) {
  const int64_t size = tokens_.size(0);
  TORCH_CHECK(length >= 1 && length <= size, "a window of ", length, " tokens does not fit in ",
              size, " tokens");
  // The sampling kernel takes the generator's lock itself.
  torch::Tensor starts = torch::randint(0, size - length + 1, {batch, 1}, generator_, torch::kLong);
  ++batches_drawn_;
  torch::Tensor index = starts + torch::arange(length, torch::kLong).unsqueeze(0);
  return tokens_.index_select(0, index.view(-1)).view({batch, length});
}

torch::Tensor WindowSampler::GeneratorState() const {
  at::Generator generator = generator_;
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void WindowSampler::Restore(const torch::Tensor& generator_state, int64_t batches_drawn) {
  std::lock_guard<std::mutex> lock(generator_.mutex());
  generator_.set_state(generator_state);
  batches_drawn_ = batches_drawn;
}

}  // namespace performer::training
