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

StateSnapshot StateSnapshot::OnHost() const {
  std::vector<torch::Tensor> flat;
  bool on_host = true;
  for (const std::vector<torch::Tensor>& tensors : layers) {
    for (const torch::Tensor& t : tensors) {
      on_host = on_host && t.is_cpu();
      flat.push_back(t.reshape({-1}));
    }
  }
  if (on_host) return *this;
  // The pool keeps every tensor in one dtype, so one buffer holds them all.
  const torch::Tensor host = torch::cat(flat).to(torch::kCPU);
  StateSnapshot out;
  out.position = position;
  int64_t offset = 0;
  for (const std::vector<torch::Tensor>& tensors : layers) {
    std::vector<torch::Tensor> row;
    for (const torch::Tensor& t : tensors) {
      row.push_back(host.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
    out.layers.push_back(std::move(row));
  }
  return out;
}

}  // namespace performer
