// One query's attention scores over its keys (the CPU attention kernels'
// row form): scores[j] = (query . key_j) * temp for j in [0, count), key j
// at key + j * stride, e dimensions each.
//
// Two instantiations (kernels/cpu/simd.h), which differ in their bits:
// - portable: lane l (of 8) sums dimensions l, l + 8, ... in order, the
//   lanes then meeting in a fixed tree;
// - AVX2, for e a multiple of 8: the same lanes, each product-sum fused (one
//   rounding), eight keys a pass, the lanes meeting in `hadd`'s tree.
// Either way a key's score is a chain of operations fixed by e, whatever the
// other keys, count or the key's place among them. Which one runs is fixed
// for the process by ScoresFor.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/simd.h"

namespace performer::kernels::cpu {

inline constexpr int64_t kScoreLanes = 8;

struct ScoreArgs {
  const float* query;
  const float* key;
  int64_t stride;  // floats from one key to the next
  int64_t e;
  int64_t count;
  float temp;
};

// scores[0..count) of `a`; `scores` has room for count rounded up to a
// multiple of kScoreLanes (the AVX2 form writes whole blocks).
using ScoresFunction = void (*)(const ScoreArgs& a, float* scores);

inline float PortableDot(const float* query, const float* key, int64_t e) {
  float lane[kScoreLanes] = {};
  int64_t i = 0;
  for (; i + kScoreLanes <= e; i += kScoreLanes) {
    for (int64_t l = 0; l < kScoreLanes; ++l) lane[l] += query[i + l] * key[i + l];
  }
  for (int64_t l = 0; i < e; ++i, ++l) lane[l] += query[i] * key[i];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

inline void ScoresPortable(const ScoreArgs& a, float* scores) {
  for (int64_t j = 0; j < a.count; ++j) {
    scores[j] = PortableDot(a.query, a.key + j * a.stride, a.e) * a.temp;
  }
}

#if PERFORMER_SIMD_HAVE_AVX2
// Lane k of the result is acc[k]'s eight lanes summed as
// ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)), the same tree for every k.
PERFORMER_SIMD_TARGET_AVX2 PERFORMER_SIMD_INLINE __m256 SumLanesOfEach(const __m256* acc) {
  const __m256 ab = _mm256_hadd_ps(acc[0], acc[1]);
  const __m256 cd = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 ef = _mm256_hadd_ps(acc[4], acc[5]);
  const __m256 gh = _mm256_hadd_ps(acc[6], acc[7]);
  // [a0123 b0123 c0123 d0123 | a4567 b4567 c4567 d4567], and e to h.
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  const __m256 efgh = _mm256_hadd_ps(ef, gh);
  return _mm256_add_ps(_mm256_permute2f128_ps(abcd, efgh, 0x20),
                       _mm256_permute2f128_ps(abcd, efgh, 0x31));
}

// A last block short of eight keys repeats its last key, so every key's
// score is the same chain of operations wherever it falls.
PERFORMER_SIMD_TARGET_AVX2 inline void ScoresAvx2(const ScoreArgs& a, float* scores) {
  const __m256 temp = _mm256_set1_ps(a.temp);
  for (int64_t j = 0; j < a.count; j += kScoreLanes) {
    const float* key[kScoreLanes];
#pragma GCC unroll 8
    for (int64_t b = 0; b < kScoreLanes; ++b) {
      key[b] = a.key + std::min(j + b, a.count - 1) * a.stride;
    }
    __m256 acc[kScoreLanes];
#pragma GCC unroll 8
    for (auto& lane : acc) lane = _mm256_setzero_ps();
    for (int64_t i = 0; i < a.e; i += kScoreLanes) {
      const __m256 query = _mm256_loadu_ps(a.query + i);
#pragma GCC unroll 8
      for (int64_t b = 0; b < kScoreLanes; ++b) {
        acc[b] = _mm256_fmadd_ps(query, _mm256_loadu_ps(key[b] + i), acc[b]);
      }
    }
    _mm256_storeu_ps(scores + j, _mm256_mul_ps(SumLanesOfEach(acc), temp));
  }
}
#endif

// The form that runs for queries and keys of e dimensions.
inline ScoresFunction ScoresFor(int64_t e) {
#if PERFORMER_SIMD_HAVE_AVX2
  if (e % kScoreLanes == 0 && simd::UseAvx2Fma()) return ScoresAvx2;
#endif
  static_cast<void>(e);
  return ScoresPortable;
}

}  // namespace performer::kernels::cpu
