// The slot state of recurrent attentions that keep every past key and value
// (recurrent full attention, and any attention whose weights need all the
// keys): per sequence keys [T, H, E] and values [T, H, D], T = the longest
// sequence a request may reach, so the pool is sized before admission. A
// call writes its n new keys and values at each row's positions and reads
// the window [0, rows.live_length), each token seeing the keys up to its own.
#pragma once

#include <torch/types.h>

#include <vector>

#include "core/recurrent/slot_state.h"

namespace performer {

std::vector<SlotTensorSpec> KeyValueSlotSpec(const SlotShape& shape);

struct KeyValueWindow {
  torch::Tensor keys;    // [N, T', H, E], T' = rows.live_length
  torch::Tensor values;  // [N, T', H, D]
  torch::Tensor last;    // [N, n] int64: the position of token i, its last visible key

  // [N, 1, n, T'] bool: key t is visible to token i of the call. Built on
  // each call (N * n * T' bytes), for the attentions that mask scores.
  torch::Tensor Visible() const;
};

// keys [N, n, H, E], values [N, n, H, D]: stores them at positions
// rows.positions + 0..n-1 of each row (rows.tensors = {keys, values} of
// KeyValueSlotSpec) and returns the live window.
KeyValueWindow AppendKeyValues(const torch::Tensor& keys, const torch::Tensor& values,
                               SlotRows& rows);

}  // namespace performer
