// Random training windows from a token sequence: each batch row is `length`
// consecutive tokens starting at a position drawn uniformly from [0,
// size - length] by the sampler's own generator, seeded once. Its state (the
// generator's state and the number of batches drawn, "the data position")
// goes into checkpoints, so a resumed run draws the batches the
// uninterrupted one would have drawn.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>

namespace performer::training {

class WindowSampler {
 public:
  WindowSampler(torch::Tensor tokens, uint64_t seed);

  // [batch, length] int64. TORCH_CHECKs length <= the number of tokens.
  torch::Tensor Next(int64_t batch, int64_t length);

  int64_t batches_drawn() const { return batches_drawn_; }
  // The generator state (a uint8 tensor) and the batch count, for checkpoints.
  torch::Tensor GeneratorState() const;
  void Restore(const torch::Tensor& generator_state, int64_t batches_drawn);

 private:
  torch::Tensor tokens_;
  at::Generator generator_;
  int64_t batches_drawn_ = 0;
};

}  // namespace performer::training
