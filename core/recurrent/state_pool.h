// Preallocated recurrent states of a layer stack for `capacity` sequences:
// for every layer the tensors its attention asked for (slot_state.h), each
// [capacity, spec.shape...], and the tokens each slot has consumed. A batched
// step runs on views of a range of rows; any other subset is gathered and
// scattered back.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/recurrent/slot_state.h"
#include "core/recurrent/state_snapshot.h"

namespace performer {

class StatePool {
 public:
  StatePool() = default;
  // layers[i]: the tensors of layer i, as its attention's SlotStateSpec.
  // The state tensors take the floating dtype of `options` (float32 when it
  // names none), so that a model in float64 decodes in float64.
  StatePool(const std::vector<std::vector<SlotTensorSpec>>& layers, int64_t capacity,
            const torch::TensorOptions& options);

  int64_t capacity() const { return positions_.defined() ? positions_.size(0) : 0; }
  // The tokens each slot has consumed: [capacity] int64, the tensor the
  // rows' positions are views of.
  const torch::Tensor& positions() const { return positions_; }
  // Exact bytes of one sequence: every layer's tensors and its position.
  int64_t BytesPerSequence() const;

  // Rows [start, start + count) as views, one SlotRows per layer.
  std::vector<SlotRows> Rows(int64_t start, int64_t count, int64_t live_length) const;
  // Copies of the rows `index` (int64 [k], on the pool's device), and
  // writing such copies back.
  std::vector<SlotRows> Gather(const torch::Tensor& index, int64_t live_length) const;
  void Scatter(const torch::Tensor& index, const std::vector<SlotRows>& rows);
  void CopyRow(int64_t from, int64_t to);
  // Puts rows [start, start + count) in the state of a new sequence.
  void ResetRows(int64_t start, int64_t count);

  // A copy of row `slot` (its position included), on the pool's device.
  StateSnapshot Read(int64_t slot) const;
  // InvalidArgument when the snapshot's layers, shapes or dtypes are not
  // this pool's.
  absl::Status CheckLayout(const StateSnapshot& snapshot) const;
  // Writes a snapshot into row `slot` (CheckLayout first: on error the row
  // is left as it was).
  absl::Status Write(int64_t slot, const StateSnapshot& snapshot);

 private:
  std::vector<std::vector<torch::Tensor>> layers_;
  std::vector<std::vector<double>> empty_values_;
  torch::Tensor positions_;  // [capacity] int64
};

}  // namespace performer
