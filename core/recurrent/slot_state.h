// The decode contract of recurrent attentions over a slot pool.
//
// A server decodes many sequences at once. Each sequence owns one slot (row)
// of preallocated state tensors whose first dimension is the slot, so that a
// batched step runs on a range of rows without copies, and the memory of one
// sequence is known exactly before it is admitted. A recurrent attention
// describes the tensors it keeps per sequence (SlotTensorSpec) and advances a
// batch of rows by n tokens at once (n = 1 is a decode step, n > 1 a chunk of
// a prompt): RecurrentAttentionImpl::SlotStateSpec / ForwardSlots.
//
// A state whose size grows with the sequence (full attention's keys and
// values) is allocated for the longest sequence a request may reach
// (SlotShape::max_length), so admission stays exact.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace performer {

// What an attention layer tells its inner attention about the state it needs.
struct SlotShape {
  int64_t heads = 0;
  int64_t query_dims = 0;  // E, per head
  int64_t value_dims = 0;  // D, per head
  int64_t max_length = 0;  // tokens a sequence may reach
};

// One state tensor of one sequence: `shape` without the slot dimension, and
// the value of an empty (new) sequence. The pool holds it in the model's
// floating dtype (float32 when served).
struct SlotTensorSpec {
  std::vector<int64_t> shape;
  double empty_value = 0.0;
};

// N rows of a pool as seen by one attention: its tensors ([N, spec.shape...],
// views of the pool or gathered copies, updated in place) and what every
// attention of the stack shares: positions [N] int64 on the tensors' device,
// the tokens each row consumed before this call, and `live_length`, the
// largest positions[i] + n of the call (host side, so that a growing state is
// read only up to it without a device read).
struct SlotRows {
  std::vector<torch::Tensor> tensors;
  torch::Tensor positions;
  int64_t live_length = 0;
};

// Bytes one sequence's tensors occupy in float32.
inline int64_t SlotStateBytes(const std::vector<SlotTensorSpec>& specs) {
  int64_t bytes = 0;
  for (const SlotTensorSpec& spec : specs) {
    int64_t elements = 1;
    for (int64_t d : spec.shape) elements *= d;
    bytes += elements * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

}  // namespace performer
