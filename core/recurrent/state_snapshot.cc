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

StateSnapshot StateSnapshot::CopyTo(const torch::Device& device) const {
  std::vector<torch::Tensor> flat;
  for (const std::vector<torch::Tensor>& tensors : layers) {
    for (const torch::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  }
  // cat makes the copy; `to` moves it when it was made on another device.
  torch::Tensor buffer;
  if (!flat.empty()) buffer = torch::cat(flat).to(device);
  StateSnapshot out;
  out.position = position;
  int64_t offset = 0;
  for (const std::vector<torch::Tensor>& tensors : layers) {
    std::vector<torch::Tensor> row;
    for (const torch::Tensor& t : tensors) {
      row.push_back(buffer.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    out.layers.push_back(std::move(row));
  }
  return out;
}

StateSnapshot StateSnapshot::OnHost() const {
  for (const std::vector<torch::Tensor>& tensors : layers) {
    for (const torch::Tensor& t : tensors) {
      if (!t.is_cpu()) return CopyTo(torch::kCPU);
    }
  }
  return *this;
}

}  // namespace performer
