// One query's softmax attention over its scores, every sum in the order of
// the keys, so that a query's output depends on its own scores and values
// alone (the CPU attention kernels' row form):
//
//   out[0..d) = sum_j (exp(s_j - max s) / sum_j' exp(s_j' - max s)) value(j)
//
// scores[0..count) (count >= 1) are replaced by exp(s_j - max s);
// value_at(j) returns key j's value row (d floats).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace performer::kernels::cpu {

template <typename ValueAt>
void SoftmaxWeightedSum(float* scores, int64_t count, int64_t d, const ValueAt& value_at,
                        float* out) {
  float best = std::numeric_limits<float>::lowest();
  for (int64_t j = 0; j < count; ++j) best = std::max(best, scores[j]);
  float total = 0.0f;
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = std::exp(scores[j] - best);
    total += scores[j];
  }
  std::fill(out, out + d, 0.0f);
  for (int64_t j = 0; j < count; ++j) {
    const float weight = scores[j] / total;
    const float* value = value_at(j);
    for (int64_t i = 0; i < d; ++i) out[i] += weight * value[i];
  }
}

}  // namespace performer::kernels::cpu
