#include "core/recurrent/state_pool.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace performer {

StatePool::StatePool(const std::vector<std::vector<SlotTensorSpec>>& layers, int64_t capacity,
                     const torch::TensorOptions& options) {
  const torch::TensorOptions state_options =
      options.has_dtype() && c10::isFloatingType(options.dtype().toScalarType())
          ? options
          : options.dtype(torch::kFloat);
  for (const std::vector<SlotTensorSpec>& specs : layers) {
    std::vector<torch::Tensor> tensors;
    std::vector<double> empty;
    for (const SlotTensorSpec& spec : specs) {
      std::vector<int64_t> shape{capacity};
      shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
      tensors.push_back(torch::full(shape, spec.empty_value, state_options));
      empty.push_back(spec.empty_value);
    }
    layers_.push_back(std::move(tensors));
    empty_values_.push_back(std::move(empty));
  }
  positions_ = torch::zeros({capacity}, options.dtype(torch::kLong));
}

int64_t StatePool::BytesPerSequence() const {
  int64_t bytes = static_cast<int64_t>(sizeof(int64_t));
  for (const std::vector<torch::Tensor>& tensors : layers_) {
    for (const torch::Tensor& t : tensors) {
      bytes += t.numel() / std::max<int64_t>(t.size(0), 1) * static_cast<int64_t>(t.element_size());
    }
  }
  return bytes;
}

std::vector<SlotRows> StatePool::Rows(int64_t start, int64_t count, int64_t live_length) const {
  // One view of the positions, shared by every layer (a step makes these
  // views for every layer: each costs a dispatch).
  const torch::Tensor positions = positions_.narrow(0, start, count);
  std::vector<SlotRows> out;
  out.reserve(layers_.size());
  for (const std::vector<torch::Tensor>& tensors : layers_) {
    SlotRows rows;
    rows.tensors.reserve(tensors.size());
    for (const torch::Tensor& t : tensors) rows.tensors.push_back(t.narrow(0, start, count));
    rows.positions = positions;
    rows.live_length = live_length;
    out.push_back(std::move(rows));
  }
  return out;
}

std::vector<SlotRows> StatePool::Gather(const torch::Tensor& index, int64_t live_length) const {
  torch::Tensor positions = positions_.index_select(0, index);
  std::vector<SlotRows> out;
  for (const std::vector<torch::Tensor>& tensors : layers_) {
    SlotRows rows;
    for (const torch::Tensor& t : tensors) rows.tensors.push_back(t.index_select(0, index));
    rows.positions = positions;
    rows.live_length = live_length;
    out.push_back(std::move(rows));
  }
  return out;
}

void StatePool::Scatter(const torch::Tensor& index, const std::vector<SlotRows>& rows) {
  TORCH_CHECK(rows.size() == layers_.size(), "StatePool::Scatter: ", rows.size(),
              " layers for a pool of ", layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (size_t j = 0; j < layers_[i].size(); ++j) {
      layers_[i][j].index_copy_(0, index, rows[i].tensors.at(j));
    }
  }
  if (!rows.empty()) positions_.index_copy_(0, index, rows.front().positions);
}

void StatePool::CopyRow(int64_t from, int64_t to) {
  for (std::vector<torch::Tensor>& tensors : layers_) {
    for (torch::Tensor& t : tensors) t[to].copy_(t[from]);
  }
  positions_[to].copy_(positions_[from]);
}

void StatePool::ResetRows(int64_t start, int64_t count) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (size_t j = 0; j < layers_[i].size(); ++j) {
      layers_[i][j].narrow(0, start, count).fill_(empty_values_[i][j]);
    }
  }
  positions_.narrow(0, start, count).zero_();
}

StateSnapshot StatePool::Read(int64_t slot) const {
  // The row as views of the pool, then copied on the pool's device (on a
  // GPU, without waiting for it).
  StateSnapshot row;
  row.position = positions_[slot].item<int64_t>();
  row.layers.reserve(layers_.size());
  for (const std::vector<torch::Tensor>& tensors : layers_) {
    std::vector<torch::Tensor> views;
    views.reserve(tensors.size());
    for (const torch::Tensor& t : tensors) views.push_back(t[slot]);
    row.layers.push_back(std::move(views));
  }
  return row.CopyTo(positions_.device());
}

absl::Status StatePool::CheckLayout(const StateSnapshot& snapshot) const {
  if (snapshot.layers.size() != layers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the state has ", snapshot.layers.size(),
                                                   " layers; this model keeps ", layers_.size()));
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (snapshot.layers[i].size() != layers_[i].size()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", i, " of the state has ",
                                                     snapshot.layers[i].size(), " tensors; ",
                                                     layers_[i].size(), " expected"));
    }
    for (size_t j = 0; j < layers_[i].size(); ++j) {
      // Shapes and dtypes only (no view of the pool is made): this may run
      // beside the thread that decodes.
      const torch::Tensor& given = snapshot.layers[i][j];
      const torch::Tensor& pooled = layers_[i][j];
      const c10::IntArrayRef row = pooled.sizes().slice(1);
      if (!given.defined() || given.sizes() != row || given.scalar_type() != pooled.scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", j, " of layer ", i, " of the state is [",
            given.defined() ? absl::StrJoin(given.sizes(), ", ") : std::string("undefined"),
            "]; this model keeps [", absl::StrJoin(row, ", "), "] ",
            c10::toString(pooled.scalar_type())));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status StatePool::Write(int64_t slot, const StateSnapshot& snapshot) {
  if (absl::Status s = CheckLayout(snapshot); !s.ok()) return s;
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (size_t j = 0; j < layers_[i].size(); ++j) layers_[i][j][slot].copy_(snapshot.layers[i][j]);
  }
  positions_[slot].fill_(snapshot.position);
  return absl::OkStatus();
}

}  // namespace performer
