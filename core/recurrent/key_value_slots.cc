#include "core/recurrent/key_value_slots.h"

#include <torch/torch.h>

namespace performer {

std::vector<SlotTensorSpec> KeyValueSlotSpec(const SlotShape& shape) {
  return {{{shape.max_length, shape.heads, shape.query_dims}, 0.0},
          {{shape.max_length, shape.heads, shape.value_dims}, 0.0}};
}

KeyValueWindow AppendKeyValues(const torch::Tensor& keys, const torch::Tensor& values,
                               SlotRows& rows) {
  TORCH_CHECK(rows.tensors.size() == 2, "a key/value slot state has 2 tensors, got ",
              rows.tensors.size());
  torch::Tensor& key_pool = rows.tensors[0];
  torch::Tensor& value_pool = rows.tensors[1];
  const int64_t batch = keys.size(0), n = keys.size(1);
  TORCH_CHECK(rows.live_length <= key_pool.size(1), "sequences of ", rows.live_length,
              " tokens pass the ", key_pool.size(1), " positions this key/value state holds");
  const torch::TensorOptions index_options = rows.positions.options();
  torch::Tensor offsets = torch::arange(n, index_options);
  torch::Tensor at = rows.positions.unsqueeze(1) + offsets.unsqueeze(0);  // [N, n]
  torch::Tensor row = torch::arange(batch, index_options).unsqueeze(1).expand({batch, n});
  key_pool.index_put_({row, at}, keys.to(key_pool.scalar_type()));
  value_pool.index_put_({row, at}, values.to(value_pool.scalar_type()));
  const int64_t live = rows.live_length;
  return {key_pool.narrow(1, 0, live), value_pool.narrow(1, 0, live), at};
}

torch::Tensor KeyValueWindow::Visible() const {
  const int64_t live = keys.size(1);
  torch::Tensor t = torch::arange(live, last.options()).view({1, 1, live});
  return (t <= last.unsqueeze(-1)).unsqueeze(1);
}

}  // namespace performer
