#include "kernels/cpu/causal_softmax_attention_cpu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/simd.h"
#include "kernels/cpu/softmax_weighted_sum.h"

namespace performer::kernels::cpu {
namespace {

constexpr int64_t kLanes = 8;
// A thread copies a (row, head)'s keys and values into contiguous rows when
// it has at least this many of its queries.
constexpr int64_t kCopyFromQueries = 4;

// Where the scores of one (row, token, head) triple come from: its query,
// its keys (key j at key + j * stride) and the scale.
struct ScoreArgs {
  const float* query;
  const float* key;
  int64_t stride;
  int64_t e;
  int64_t count;
  float temp;
};

// Portable: query . key over e dimensions, lane l summing dimensions l,
// l + 8, ... in order, the lanes then meeting in a fixed tree, the same for
// every key.
float Dot(const float* query, const float* key, int64_t e) {
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= e; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) lane[l] += query[i + l] * key[i + l];
  }
  for (int64_t l = 0; i < e; ++i, ++l) lane[l] += query[i] * key[i];
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

void ScoresPortable(const ScoreArgs& a, float* scores) {
  for (int64_t j = 0; j < a.count; ++j)
    scores[j] = Dot(a.query, a.key + j * a.stride, a.e) * a.temp;
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

// AVX2, for e a multiple of 8: eight keys at a time, lane l of a key's
// accumulator fusing q[i] * k[i] for i = l, l + 8, ... in order, then
// SumLanesOfEach. A last block short of eight keys repeats its last key, so
// every key's score is the same chain of operations wherever it falls.
// scores has room for count rounded up to a multiple of 8.
PERFORMER_SIMD_TARGET_AVX2 void ScoresAvx2(const ScoreArgs& a, float* scores) {
  const __m256 temp = _mm256_set1_ps(a.temp);
  for (int64_t j = 0; j < a.count; j += kLanes) {
    const float* key[kLanes];
#pragma GCC unroll 8
    for (int64_t b = 0; b < kLanes; ++b) key[b] = a.key + std::min(j + b, a.count - 1) * a.stride;
    __m256 acc[kLanes];
#pragma GCC unroll 8
    for (auto& lane : acc) lane = _mm256_setzero_ps();
    for (int64_t i = 0; i < a.e; i += kLanes) {
      const __m256 query = _mm256_loadu_ps(a.query + i);
#pragma GCC unroll 8
      for (int64_t b = 0; b < kLanes; ++b) {
        acc[b] = _mm256_fmadd_ps(query, _mm256_loadu_ps(key[b] + i), acc[b]);
      }
    }
    _mm256_storeu_ps(scores + j, _mm256_mul_ps(SumLanesOfEach(acc), temp));
  }
}
#endif

}  // namespace

torch::Tensor CausalSoftmaxAttentionForward(const torch::Tensor& queries, const torch::Tensor& keys,
                                            const torch::Tensor& values, const torch::Tensor& last,
                                            float temp) {
  const int64_t rows = queries.size(0), tokens = queries.size(1), heads = queries.size(2);
  const int64_t e = queries.size(3), d = values.size(3);
  torch::Tensor out = torch::empty({rows, tokens, heads, d}, queries.options());
  const float* q = queries.data_ptr<float>();
  const float* k = keys.data_ptr<float>();
  const float* v = values.data_ptr<float>();
  const int64_t* visible = last.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  const int64_t k_row = keys.stride(0), k_pos = keys.stride(1);
  const int64_t v_row = values.stride(0), v_pos = values.stride(1);
  const int64_t max_keys = keys.size(1);
  void (*scores_of)(const ScoreArgs&, float*) = ScoresPortable;
#if PERFORMER_SIMD_HAVE_AVX2
  if (e % kLanes == 0 && simd::UseAvx2Fma()) scores_of = ScoresAvx2;
#endif
  // The triples in (row, head, token) order, so that a thread's consecutive
  // queries read the same keys and values. Where a thread has several
  // queries of one (row, head), it first copies the keys and values they
  // read into contiguous rows: a key's row is strided by H * E in the pool,
  // which spreads a long window over few cache sets. The copy moves values
  // without arithmetic, so no bit depends on whether it was made.
  at::parallel_for(0, rows * heads * tokens, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(max_keys + kLanes));
    std::vector<float> key_rows, value_rows;
    for (int64_t first = begin; first < end;) {
      const int64_t r = first / (tokens * heads), h = (first / tokens) % heads;
      const int64_t stop = std::min(end, (first / tokens + 1) * tokens);
      const int64_t* last_of_row = visible + r * tokens;
      const float* key = k + r * k_row + h * e;
      const float* value = v + r * v_row + h * d;
      int64_t key_stride = k_pos, value_stride = v_pos;
      if (stop - first >= kCopyFromQueries) {
        const int64_t count =
            *std::max_element(last_of_row + first % tokens, last_of_row + (stop - 1) % tokens + 1) +
            1;
        key_rows.resize(static_cast<size_t>(count * e));
        value_rows.resize(static_cast<size_t>(count * d));
        for (int64_t j = 0; j < count; ++j) {
          std::copy_n(key + j * k_pos, e, key_rows.data() + j * e);
          std::copy_n(value + j * v_pos, d, value_rows.data() + j * d);
        }
        key = key_rows.data();
        value = value_rows.data();
        key_stride = e;
        value_stride = d;
      }
      for (int64_t index = first; index < stop; ++index) {
        const int64_t token = index % tokens, query = (r * tokens + token) * heads + h;
        const int64_t count = last_of_row[token] + 1;
        scores_of({q + query * e, key, key_stride, e, count, temp}, scores.data());
        SoftmaxWeightedSum(
            scores.data(), count, d, [&](int64_t j) { return value + j * value_stride; },
            o + query * d);
      }
      first = stop;
    }
  });
  return out;
}

}  // namespace performer::kernels::cpu
