#include "core/attention/rotary.h"

namespace performer {

InterleavedRotary MakeInterleavedRotary(const torch::Tensor& table) {
  const int64_t d = table.size(-1);
  torch::Tensor sin = table.narrow(-1, 0, d / 2).repeat_interleave(2, -1).contiguous();
  torch::Tensor cos = table.narrow(-1, d / 2, d / 2).repeat_interleave(2, -1).contiguous();
  std::vector<int64_t> pair_shape = sin.sizes().vec();
  pair_shape.back() = d / 2;
  pair_shape.push_back(2);
  torch::Tensor signs = torch::tensor({-1.0f, 1.0f}, sin.options());
  torch::Tensor signed_sin = (sin.reshape(pair_shape) * signs).reshape(sin.sizes()).contiguous();
  return {sin, cos, signed_sin};
}

torch::Tensor ApplyInterleavedRotary(const torch::Tensor& t, const InterleavedRotary& rows) {
  const int64_t d = t.size(-1);
  std::vector<int64_t> pair_shape = t.sizes().vec();
  pair_shape.back() = d / 2;
  pair_shape.push_back(2);
  torch::Tensor swapped = t.reshape(pair_shape).flip(-1).reshape(t.sizes());
  return torch::addcmul(t * rows.cos, swapped, rows.signed_sin);
}

torch::Tensor HalfRotaryAngles(const torch::Tensor& slots, const torch::Tensor& inv_freq) {
  torch::Tensor freqs = slots.to(inv_freq.scalar_type()).unsqueeze(-1) * inv_freq;
  return torch::cat({freqs, freqs}, -1);
}

torch::Tensor ApplyHalfRotary(const torch::Tensor& t, const torch::Tensor& angles) {
  const int64_t half = t.size(-1) / 2;
  torch::Tensor rotated = torch::cat({-t.narrow(-1, half, half), t.narrow(-1, 0, half)}, -1);
  return t * angles.cos() + rotated * angles.sin();
}

}  // namespace performer
