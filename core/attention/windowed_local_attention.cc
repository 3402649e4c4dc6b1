#include "core/attention/windowed_local_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/attention/rotary.h"
#include "kernels/windowed_ring_attention.h"

namespace performer {
namespace {

constexpr float kMaskValue = std::numeric_limits<float>::lowest();

// local-attention's look_around on [B, W, w, ...]: window i sees windows
// i - backward .. i + forward concatenated along axis 2; missing windows hold
// `pad_value`.
torch::Tensor LookAround(const torch::Tensor& x, int64_t backward, int64_t forward,
                         double pad_value) {
  const int64_t windows = x.size(1);
  std::vector<int64_t> pad(2 * (x.dim() - 2), 0);
  pad.push_back(backward);
  pad.push_back(forward);
  torch::Tensor padded = torch::constant_pad_nd(x, pad, pad_value);
  std::vector<torch::Tensor> parts;
  for (int64_t i = 0; i <= backward + forward; ++i) parts.push_back(padded.narrow(1, i, windows));
  return torch::cat(parts, 2);
}

}  // namespace

WindowedLocalAttentionImpl::WindowedLocalAttentionImpl(int64_t dim_head, int64_t window_size,
                                                       bool causal, double dropout)
    : window_size_(window_size), causal_(causal), dropout_(dropout) {
  auto rel_pos = register_module("rel_pos", std::make_shared<torch::nn::Module>());
  inv_freq_ = 1.0 / torch::pow(10000.0, torch::arange(0, dim_head, 2).to(torch::kFloat) / dim_head);
  inv_freq_ = rel_pos->register_buffer("inv_freq", inv_freq_);
}

torch::Tensor WindowedLocalAttentionImpl::forward(const torch::Tensor& q, const torch::Tensor& k,
                                                  const torch::Tensor& v,
                                                  const torch::Tensor& mask) {
  const int64_t b = q.size(0), heads = q.size(1), n = q.size(2), d = q.size(3);
  const int64_t w = window_size_;
  const int64_t padded_n = (n + w - 1) / w * w, windows = padded_n / w;
  const int64_t backward = 1, forward = causal_ ? 0 : 1;
  const int64_t span = (backward + forward + 1) * w;
  auto windowed = [&](const torch::Tensor& t) {
    torch::Tensor flat = t.reshape({b * heads, n, d});
    if (padded_n != n) flat = torch::constant_pad_nd(flat, {0, 0, 0, padded_n - n}, 0.0);
    return flat.view({b * heads, windows, w, d});
  };
  torch::Tensor bq = windowed(q) * std::pow(static_cast<double>(d), -0.5);
  torch::Tensor bk = LookAround(windowed(k), backward, forward, -1.0);
  torch::Tensor bv = LookAround(windowed(v), backward, forward, -1.0);

  torch::Tensor angles = HalfRotaryAngles(torch::arange(span, q.options()), inv_freq_);
  bq = ApplyHalfRotary(bq, angles.narrow(0, span - w, w));
  bk = ApplyHalfRotary(bk, angles);

  torch::TensorOptions long_options = q.options().dtype(torch::kLong);
  torch::Tensor query_pos = torch::arange(padded_n, long_options).view({1, windows, w});
  torch::Tensor key_pos = LookAround(query_pos.unsqueeze(-1), backward, forward, -1.0).squeeze(-1);

  torch::Tensor sim = torch::matmul(bq, bk.transpose(-1, -2));  // [B, W, w, span]
  if (causal_) {
    sim.masked_fill_(query_pos.unsqueeze(-1) < key_pos.unsqueeze(-2), kMaskValue);
  }
  sim.masked_fill_((key_pos == -1).unsqueeze(-2), kMaskValue);
  if (mask.defined()) {
    torch::Tensor m = mask.to(torch::kBool);
    if (padded_n != n) m = torch::constant_pad_nd(m, {0, padded_n - n}, 0.0).to(torch::kBool);
    m = LookAround(m.view({b, windows, w, 1}).to(torch::kFloat), backward, forward, 0.0)
            .squeeze(-1)
            .to(torch::kBool);                        // [b, W, span]
    m = m.repeat_interleave(heads, 0).unsqueeze(-2);  // [b*lh, W, 1, span]
    sim.masked_fill_(m.logical_not(), kMaskValue);
  }
  torch::Tensor attn = sim.softmax(-1);
  if (dropout_ > 0.0 && is_training()) attn = torch::dropout(attn, dropout_, /*train=*/true);
  torch::Tensor out = torch::matmul(attn, bv).reshape({b * heads, padded_n, d});
  return out.narrow(1, 0, n).reshape({b, heads, n, d});
}

torch::Tensor WindowedLocalAttentionImpl::StepTensorOps(const torch::Tensor& q,
                                                        const torch::Tensor& k,
                                                        const torch::Tensor& v,
                                                        const torch::Tensor& positions,
                                                        const torch::Tensor& ring_k,
                                                        const torch::Tensor& ring_v) const {
  const int64_t rows = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t w = window_size_, ring = 2 * w;
  torch::Tensor entry = (positions % ring).view({rows, 1, 1, 1}).expand({rows, heads, 1, d});
  ring_k.scatter_(2, entry, k.unsqueeze(2));
  ring_v.scatter_(2, entry, v.unsqueeze(2));

  torch::Tensor p = positions.view({rows, 1});
  torch::Tensor entries = torch::arange(ring, positions.options()).view({1, ring});
  torch::Tensor entry_pos = p - torch::remainder(p - entries, ring);  // [B, 2w]
  torch::Tensor window_start = torch::div(p, w, "floor") * w - w;     // [B, 1]
  torch::Tensor visible = (entry_pos >= 0) & (entry_pos >= window_start);
  torch::Tensor key_angles = HalfRotaryAngles(entry_pos - window_start, inv_freq_).unsqueeze(1);
  torch::Tensor query_angles = HalfRotaryAngles(p - window_start, inv_freq_);  // [B, 1, d]
  torch::Tensor qr = ApplyHalfRotary(q * std::pow(static_cast<double>(d), -0.5), query_angles);
  torch::Tensor kr = ApplyHalfRotary(ring_k, key_angles);               // [B, lh, 2w, d]
  torch::Tensor sim = torch::matmul(kr, qr.unsqueeze(-1)).squeeze(-1);  // [B, lh, 2w]
  sim.masked_fill_(visible.logical_not().unsqueeze(1), kMaskValue);
  return torch::matmul(sim.softmax(-1).unsqueeze(-2), ring_v).squeeze(-2);
}

torch::Tensor WindowedLocalAttentionImpl::ExtendTensorOps(const torch::Tensor& q,
                                                          const torch::Tensor& k,
                                                          const torch::Tensor& v, int64_t start,
                                                          const torch::Tensor& ring_k,
                                                          const torch::Tensor& ring_v) {
  const int64_t n = q.size(2), w = window_size_, ring = 2 * w;
  // The queries from `start` on look back at most to the window before
  // start's: its first position is window-aligned, so windows and their
  // rotary slots are those of the full forward, and the ring (the last 2w
  // positions) holds every key from there to start - 1.
  const int64_t first = std::max<int64_t>(0, (start / w - 1) * w);
  const int64_t prefix = start - first;
  const torch::TensorOptions index_options = k.options().dtype(torch::kLong);
  torch::Tensor held = torch::arange(first, start, index_options) % ring;
  torch::Tensor keys = torch::cat({ring_k.index_select(2, held), k}, 2);
  torch::Tensor values = torch::cat({ring_v.index_select(2, held), v}, 2);
  // The prefix positions' queries are not needed: zeros stand in for them.
  torch::Tensor queries =
      torch::cat({torch::zeros({q.size(0), q.size(1), prefix, q.size(3)}, q.options()), q}, 2);
  torch::Tensor out = forward(queries, keys, values).narrow(2, prefix, n);
  const int64_t keep = std::min(n, ring);
  torch::Tensor entries = torch::arange(start + n - keep, start + n, index_options) % ring;
  ring_k.index_copy_(2, entries, k.narrow(2, n - keep, keep));
  ring_v.index_copy_(2, entries, v.narrow(2, n - keep, keep));
  return out;
}

void WindowedLocalAttentionImpl::InitRing(const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& ring_k,
                                          const torch::Tensor& ring_v) const {
  const int64_t n = k.size(2), ring = 2 * window_size_;
  const int64_t start = std::max<int64_t>(0, n - ring);
  torch::Tensor index = torch::arange(start, n, k.options().dtype(torch::kLong)) % ring;
  ring_k.index_copy_(2, index, k.narrow(2, start, n - start));
  ring_v.index_copy_(2, index, v.narrow(2, start, n - start));
}

WindowedLocalAttentionImpl::RingTables WindowedLocalAttentionImpl::MakeRingTables(
    const torch::Device& device) const {
  const torch::Tensor inv_freq = inv_freq_.to(torch::kCPU, torch::kFloat);
  const torch::Tensor angles =
      HalfRotaryAngles(torch::arange(2 * window_size_, inv_freq.options()), inv_freq);
  return {angles.cos().contiguous().to(device), angles.sin().contiguous().to(device)};
}

void WindowedLocalAttentionImpl::PrepareForDecoding() {
  torch::NoGradGuard no_grad;
  ring_tables_ = MakeRingTables(inv_freq_.device());
}

torch::Tensor WindowedLocalAttentionImpl::RingAttention(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
    const torch::Tensor& start, const torch::Tensor& ring_k, const torch::Tensor& ring_v) const {
  const bool prepared = ring_tables_.cos.defined() && ring_tables_.cos.device() == ring_k.device();
  const RingTables tables = prepared ? ring_tables_ : MakeRingTables(ring_k.device());
  return kernels::WindowedRingAttention(q, k, v, start.to(ring_k.device()), ring_k, ring_v,
                                        tables.cos, tables.sin)
      .to(q.scalar_type());
}

torch::Tensor WindowedLocalAttentionImpl::Step(const torch::Tensor& q, const torch::Tensor& k,
                                               const torch::Tensor& v,
                                               const torch::Tensor& positions,
                                               const torch::Tensor& ring_k,
                                               const torch::Tensor& ring_v) const {
  if (!kernels::WindowedRingAttentionSupported(ring_k, ring_v)) {
    return StepTensorOps(q, k, v, positions, ring_k, ring_v);
  }
  return RingAttention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), positions, ring_k, ring_v)
      .squeeze(1);
}

torch::Tensor WindowedLocalAttentionImpl::Extend(const torch::Tensor& q, const torch::Tensor& k,
                                                 const torch::Tensor& v, int64_t start,
                                                 const torch::Tensor& ring_k,
                                                 const torch::Tensor& ring_v) {
  TORCH_CHECK(causal_, "WindowedLocalAttention: only causal local attention extends a ring");
  TORCH_CHECK(q.size(0) == 1, "WindowedLocalAttention::Extend takes one sequence, got ", q.size(0));
  if (!kernels::WindowedRingAttentionSupported(ring_k, ring_v)) {
    return ExtendTensorOps(q, k, v, start, ring_k, ring_v);
  }
  // [1, lh, n, d] <-> [1, n, lh, d].
  return RingAttention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                       torch::full({1}, start, ring_k.options().dtype(torch::kLong)), ring_k,
                       ring_v)
      .transpose(1, 2);
}

}  // namespace performer
