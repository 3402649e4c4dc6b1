// One query's softmax attention over its scores, every sum in the order of
// the keys, so that a query's output depends on its own scores and values
// alone (the CPU attention kernels' row form):
//
//   w_j = exp(s_j - max s) / sum_j' exp(s_j' - max s)
//   out[0..d) = sum_j w_j value(j)        (in the order j = 0, 1, ...)
//
// scores[0..count) (count >= 1) are replaced by the weights w_j;
// value_at(j) returns key j's value row (d floats).
//
// Two instantiations (kernels/cpu/simd.h), which differ in their bits:
// - portable: std::exp, the total and each column's sum in key order;
// - AVX2: simd::ExpAvx2 eight scores at a time, the total in eight lanes
//   (lane l sums the keys j = l mod 8 in order) meeting in a fixed tree, and
//   up to 64 output columns in registers, each multiply-add fused (one
//   rounding), in key order.
// Which one runs is fixed for the process (simd::UseAvx2Fma()); within
// either, every weight and column is a chain of operations fixed by count
// and d.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/vector_exp.h"

namespace performer::kernels::cpu {

// The weights w_j in place of the scores.
inline void SoftmaxWeightsPortable(float* scores, int64_t count) {
  float best = std::numeric_limits<float>::lowest();
  for (int64_t j = 0; j < count; ++j) best = std::max(best, scores[j]);
  float total = 0.0f;
  for (int64_t j = 0; j < count; ++j) {
    scores[j] = std::exp(scores[j] - best);
    total += scores[j];
  }
  for (int64_t j = 0; j < count; ++j) scores[j] /= total;
}

template <typename ValueAt>
void SoftmaxWeightedSumPortable(float* scores, int64_t count, int64_t d, const ValueAt& value_at,
                                float* out) {
  SoftmaxWeightsPortable(scores, count);
  std::fill(out, out + d, 0.0f);
  for (int64_t j = 0; j < count; ++j) {
    const float weight = scores[j];
    const float* value = value_at(j);
    for (int64_t i = 0; i < d; ++i) out[i] += weight * value[i];
  }
}

#if PERFORMER_SIMD_HAVE_AVX2
PERFORMER_SIMD_TARGET_AVX2 inline void SoftmaxWeightsAvx2(float* scores, int64_t count) {
  const int64_t whole = count - count % 8;
  // Lanes at or past count: all bits set in the load and store mask.
  const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count - whole)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256 best = _mm256_set1_ps(std::numeric_limits<float>::lowest());
  for (int64_t j = 0; j < whole; j += 8) best = _mm256_max_ps(best, _mm256_loadu_ps(scores + j));
  if (whole < count) {
    best = _mm256_max_ps(best, _mm256_blendv_ps(best, _mm256_maskload_ps(scores + whole, tail),
                                                _mm256_castsi256_ps(tail)));
  }
  // The maximum is exact in any order; it goes to every lane.
  best = _mm256_max_ps(best, _mm256_permute2f128_ps(best, best, 1));
  best = _mm256_max_ps(best, _mm256_shuffle_ps(best, best, _MM_SHUFFLE(1, 0, 3, 2)));
  best = _mm256_max_ps(best, _mm256_shuffle_ps(best, best, _MM_SHUFFLE(2, 3, 0, 1)));
  __m256 total = _mm256_setzero_ps();
  for (int64_t j = 0; j < whole; j += 8) {
    const __m256 e = simd::ExpAvx2(_mm256_sub_ps(_mm256_loadu_ps(scores + j), best));
    _mm256_storeu_ps(scores + j, e);
    total = _mm256_add_ps(total, e);
  }
  if (whole < count) {
    const __m256 e =
        _mm256_and_ps(simd::ExpAvx2(_mm256_sub_ps(_mm256_maskload_ps(scores + whole, tail), best)),
                      _mm256_castsi256_ps(tail));
    _mm256_maskstore_ps(scores + whole, tail, e);
    total = _mm256_add_ps(total, e);
  }
  // The lanes in HorizontalSum's fixed tree, then in every lane.
  total = _mm256_set1_ps(simd::HorizontalSum(total));
  for (int64_t j = 0; j < whole; j += 8) {
    _mm256_storeu_ps(scores + j, _mm256_div_ps(_mm256_loadu_ps(scores + j), total));
  }
  if (whole < count) {
    _mm256_maskstore_ps(scores + whole, tail,
                        _mm256_div_ps(_mm256_maskload_ps(scores + whole, tail), total));
  }
}

// out[c, c + 8 * kVectors) = sum_j scores[j] * value(j)[c, ...], a register
// per 8 columns.
template <int kVectors, typename ValueAt>
PERFORMER_SIMD_TARGET_AVX2 PERFORMER_SIMD_INLINE void WeightedColumnsAvx2(const float* scores,
                                                                          int64_t count, int64_t c,
                                                                          const ValueAt& value_at,
                                                                          float* out) {
  __m256 acc[kVectors];
#pragma GCC unroll 8
  for (int b = 0; b < kVectors; ++b) acc[b] = _mm256_setzero_ps();
  for (int64_t j = 0; j < count; ++j) {
    const __m256 weight = _mm256_broadcast_ss(scores + j);
    const float* value = value_at(j) + c;
#pragma GCC unroll 8
    for (int b = 0; b < kVectors; ++b) {
      acc[b] = _mm256_fmadd_ps(weight, _mm256_loadu_ps(value + 8 * b), acc[b]);
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < kVectors; ++b) _mm256_storeu_ps(out + c + 8 * b, acc[b]);
}

template <typename ValueAt>
PERFORMER_SIMD_TARGET_AVX2 void SoftmaxWeightedSumAvx2(float* scores, int64_t count, int64_t d,
                                                       const ValueAt& value_at, float* out) {
  SoftmaxWeightsAvx2(scores, count);
  int64_t c = 0;
  for (; c + 64 <= d; c += 64) WeightedColumnsAvx2<8>(scores, count, c, value_at, out);
  for (; c + 8 <= d; c += 8) WeightedColumnsAvx2<1>(scores, count, c, value_at, out);
  for (; c < d; ++c) {
    float sum = 0.0f;
    for (int64_t j = 0; j < count; ++j) sum = std::fma(scores[j], value_at(j)[c], sum);
    out[c] = sum;
  }
}
#endif

template <typename ValueAt>
void SoftmaxWeightedSum(float* scores, int64_t count, int64_t d, const ValueAt& value_at,
                        float* out) {
#if PERFORMER_SIMD_HAVE_AVX2
  if (simd::UseAvx2Fma()) {
    SoftmaxWeightedSumAvx2(scores, count, d, value_at, out);
    return;
  }
#endif
  SoftmaxWeightedSumPortable(scores, count, d, value_at, out);
}

}  // namespace performer::kernels::cpu
