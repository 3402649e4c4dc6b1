// One sequence's recurrent state taken out of a slot pool
// (core/recurrent/state_pool.h): every layer's tensors of its slot, without
// the slot dimension, on the pool's device (OnHost copies them out), and the
// tokens it has consumed. A value:
// it outlives the pool row it came from, and written into any row of a pool
// with the same layout that row continues exactly as the original would
// (the tensors are bit copies). Its size is the model's state bytes per
// sequence, whatever the sequence's length: this is what a prefix cache,
// a session and a state export keep.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace performer {

struct StateSnapshot {
  int64_t position = 0;                            // tokens consumed
  std::vector<std::vector<torch::Tensor>> layers;  // as the pool's layers, [spec.shape...]

  // Bytes of the tensors (and the position).
  int64_t bytes() const;
  // A copy of the state on `device`: every tensor (all of one dtype, the
  // pool's) gathered into one new buffer there, of which the copy's tensors
  // are views. One copy and one transfer: from a GPU, a copy per tensor
  // would wait for the device once per tensor.
  StateSnapshot CopyTo(const torch::Device& device) const;
  // CopyTo the host; a snapshot already there is returned as it is.
  StateSnapshot OnHost() const;
};

}  // namespace performer
