#include "kernels/cpu/windowed_ring_attention_cpu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_scores.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/softmax_weighted_sum.h"

namespace performer::kernels::cpu {
namespace {

// The ring scan: C sequences of T tokens and H heads.
struct RingScan {
  const float* q;        // [C, T, H, d]
  const float* k;        // [C, T, H, d]
  const float* v;        // [C, T, H, d]
  const int64_t* start;  // [C]: the position of each sequence's first token
  float* ring_k;         // [C, H, 2w, d]
  float* ring_v;         // [C, H, 2w, d]
  const float* cos;      // [2w, d]: the rotary of each window-relative slot
  const float* sin;      // [2w, d]
  float* out;            // [C, T, H, d]
  int64_t tokens, heads, d, w;
};

// out[i] = (x[i] * scale) * c[i] + ((sign * turned[i]) * scale) * s[i]
// for i in [0, n): one half of a rotated row, in kBytes-wide vectors. Each
// element is the same expression at any width, so the widths agree bit for
// bit (no contraction: the build is ISO C++).
template <int kBytes>
PERFORMER_SIMD_INLINE void RotateHalf(const float* x, const float* turned, float sign, float scale,
                                      const float* c, const float* s, float* out, int64_t n) {
  using V = typename simd::VecOf<float, kBytes>::type;
  constexpr int64_t kLanes = simd::VecOf<float, kBytes>::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V xv, tv, cv, sv;
    simd::Load(&xv, x + i);
    simd::Load(&tv, turned + i);
    simd::Load(&cv, c + i);
    simd::Load(&sv, s + i);
    simd::Store(out + i, (xv * scale) * cv + ((sign * tv) * scale) * sv);
  }
  for (; i < n; ++i) out[i] = (x[i] * scale) * c[i] + ((sign * turned[i]) * scale) * s[i];
}

// scale * x rotated by table row `slot` (ApplyHalfRotary: the first half
// turned by minus the second, the second by the first).
template <int kBytes>
PERFORMER_SIMD_INLINE void RotateRowOf(const RingScan& a, const float* x, int64_t slot, float scale,
                                       float* out) {
  const int64_t d = a.d, half = d / 2;
  const float* c = a.cos + slot * d;
  const float* s = a.sin + slot * d;
  RotateHalf<kBytes>(x, x + half, -1.0f, scale, c, s, out, half);
  RotateHalf<kBytes>(x + half, x, 1.0f, scale, c + half, s + half, out + half, d - half);
}

void RotateRowBaseline(const RingScan& a, const float* x, int64_t slot, float scale, float* out) {
  RotateRowOf<16>(a, x, slot, scale, out);
}

#if PERFORMER_SIMD_HAVE_AVX2
PERFORMER_SIMD_TARGET_AVX2 void RotateRowAvx2(const RingScan& a, const float* x, int64_t slot,
                                              float scale, float* out) {
  RotateRowOf<32>(a, x, slot, scale, out);
}
#endif

using RotateRowFunction = void (*)(const RingScan& a, const float* x, int64_t slot, float scale,
                                   float* out);

// The instantiations that run (kernels/cpu/simd.h), fixed for the process.
struct RingForms {
  RotateRowFunction rotate;
  ScoresFunction scores;
};

RingForms FormsFor(int64_t d) {
#if PERFORMER_SIMD_HAVE_AVX2
  if (simd::UseAvx2Fma()) return {RotateRowAvx2, ScoresFor(d)};
#endif
  return {RotateRowBaseline, ScoresFor(d)};
}

// A thread's working rows, reused across its (sequence, head) pairs.
struct RingScratch {
  std::vector<float> query;    // [d]
  std::vector<float> rotated;  // [2w, d]
  std::vector<float> scores;   // [2w + kScoreLanes]
  explicit RingScratch(const RingScan& a)
      : query(static_cast<size_t>(a.d)),
        rotated(static_cast<size_t>(2 * a.w * a.d)),
        scores(static_cast<size_t>(2 * a.w + kScoreLanes)) {}
};

// Sequence c, head h through its tokens in order (the header's loop). The
// keys of the current window are kept rotated to it in `rotated` (key j at
// row j - first), each rotated once per window rather than once per query:
// the same operations on the same values, so the same bits.
void ScanRingHead(const RingScan& a, const RingForms& forms, RingScratch& scratch, int64_t c,
                  int64_t h) {
  const int64_t d = a.d, w = a.w, ring = 2 * w;
  std::vector<float>& query = scratch.query;
  std::vector<float>& rotated = scratch.rotated;
  std::vector<float>& scores = scratch.scores;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* ring_k = a.ring_k + (c * a.heads + h) * ring * d;
  float* ring_v = a.ring_v + (c * a.heads + h) * ring * d;
  // The window `rotated` holds (none yet) and how many of its keys it has.
  int64_t rotated_start = std::numeric_limits<int64_t>::min(), rotated_keys = 0;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t row = ((c * a.tokens + t) * a.heads + h) * d;
    const int64_t p = a.start[c] + t;
    std::copy(a.k + row, a.k + row + d, ring_k + (p % ring) * d);
    std::copy(a.v + row, a.v + row + d, ring_v + (p % ring) * d);
    const int64_t window_start = (p / w) * w - w, first = std::max<int64_t>(0, window_start);
    if (window_start != rotated_start) {
      rotated_start = window_start;
      rotated_keys = 0;
    }
    for (int64_t j = first + rotated_keys; j <= p; ++j) {
      forms.rotate(a, ring_k + (j % ring) * d, j - window_start, 1.0f,
                   rotated.data() + (j - first) * d);
    }
    const int64_t count = p - first + 1;
    rotated_keys = count;
    forms.rotate(a, a.q + row, p - window_start, scale, query.data());
    forms.scores({query.data(), rotated.data(), d, d, count, 1.0f}, scores.data());
    SoftmaxWeightedSum(
        scores.data(), count, d, [&](int64_t j) { return ring_v + ((first + j) % ring) * d; },
        a.out + row);
  }
}

}  // namespace

torch::Tensor WindowedRingAttentionForward(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const torch::Tensor& start,
                                           const torch::Tensor& ring_k, const torch::Tensor& ring_v,
                                           const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t sequences = q.size(0), tokens = q.size(1), heads = q.size(2), d = q.size(3);
  torch::Tensor out = torch::empty_like(q);
  const RingScan args{q.data_ptr<float>(),
                      k.data_ptr<float>(),
                      v.data_ptr<float>(),
                      start.data_ptr<int64_t>(),
                      ring_k.data_ptr<float>(),
                      ring_v.data_ptr<float>(),
                      cos.data_ptr<float>(),
                      sin.data_ptr<float>(),
                      out.data_ptr<float>(),
                      tokens,
                      heads,
                      d,
                      ring_k.size(2) / 2};
  const int64_t grain = std::max<int64_t>(1, 256 / std::max<int64_t>(1, tokens));
  const RingForms forms = FormsFor(d);
  at::parallel_for(0, sequences * heads, grain, [&](int64_t begin, int64_t end) {
    RingScratch scratch(args);
    for (int64_t i = begin; i < end; ++i) ScanRingHead(args, forms, scratch, i / heads, i % heads);
  });
  return out;
}

}  // namespace performer::kernels::cpu
