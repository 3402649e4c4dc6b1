#include "core/models/decode_state.h"

#include <limits>

namespace performer::models {
namespace {

constexpr double kLowest = std::numeric_limits<float>::lowest();

template <typename State, typename Fn>
void VisitState(State& s, Fn&& fn) {
  for (auto& layer : s.layers) {
    fn(layer.self.key_max, kLowest);
    fn(layer.self.kv, 0.0);
    fn(layer.self.v_sum, 0.0);
    fn(layer.self.local_k, 0.0);
    fn(layer.self.local_v, 0.0);
    fn(layer.cross.kv, 0.0);
    fn(layer.attn_shift, 0.0);
    fn(layer.ff_shift, 0.0);
  }
  fn(s.positions, 0.0);
}

// Builds a state of the same structure whose tensors are fn(source tensor).
DecodeState MapState(const DecodeState& s,
                     const std::function<torch::Tensor(const torch::Tensor&)>& fn) {
  DecodeState out = s;
  VisitState(out, [&](torch::Tensor& t, double) {
    if (t.defined()) t = fn(t);
  });
  return out;
}

}  // namespace

void DecodeState::ForEach(const std::function<void(torch::Tensor&, double)>& fn) {
  VisitState(*this, [&](torch::Tensor& t, double v) {
    if (t.defined()) fn(t, v);
  });
}

void DecodeState::ForEach(const std::function<void(const torch::Tensor&, double)>& fn) const {
  VisitState(*this, [&](const torch::Tensor& t, double v) {
    if (t.defined()) fn(t, v);
  });
}

DecodeState DecodeState::Rows(int64_t start, int64_t count) const {
  return MapState(*this, [&](const torch::Tensor& t) { return t.narrow(0, start, count); });
}

DecodeState DecodeState::Gather(const torch::Tensor& index) const {
  return MapState(*this, [&](const torch::Tensor& t) { return t.index_select(0, index); });
}

void DecodeState::Scatter(const torch::Tensor& index, const DecodeState& rows) {
  std::vector<torch::Tensor> sources;
  rows.ForEach([&](const torch::Tensor& t, double) { sources.push_back(t); });
  size_t i = 0;
  ForEach([&](torch::Tensor& t, double) { t.index_copy_(0, index, sources.at(i++)); });
}

void DecodeState::CopyRow(int64_t from, int64_t to) {
  ForEach([&](torch::Tensor& t, double) { t[to].copy_(t[from]); });
}

void DecodeState::ResetRows(int64_t start, int64_t count) {
  ForEach([&](torch::Tensor& t, double v) { t.narrow(0, start, count).fill_(v); });
}

int64_t DecodeState::BytesPerRow() const {
  int64_t bytes = 0;
  ForEach([&](const torch::Tensor& t, double) {
    bytes += (t.numel() / std::max<int64_t>(t.size(0), 1)) * static_cast<int64_t>(t.element_size());
  });
  return bytes;
}

}  // namespace performer::models
