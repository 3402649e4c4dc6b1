#include "kernels/cpu/windowed_ring_attention_cpu.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

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

// scale * x rotated to window-relative slot `slot` (ApplyHalfRotary).
void RotateRow(const RingScan& a, const float* x, int64_t slot, float scale, float* out) {
  const int64_t half = a.d / 2;
  const float* c = a.cos + slot * a.d;
  const float* s = a.sin + slot * a.d;
  for (int64_t i = 0; i < a.d; ++i) {
    const float rotated = i < half ? -(x[i + half] * scale) : x[i - half] * scale;
    out[i] = (x[i] * scale) * c[i] + rotated * s[i];
  }
}

// Sequence c, head h through its tokens in order (the header's loop).
void ScanRingHead(const RingScan& a, int64_t c, int64_t h) {
  const int64_t d = a.d, w = a.w, ring = 2 * w;
  std::vector<float> query(static_cast<size_t>(d)), key(static_cast<size_t>(d));
  std::vector<float> scores(static_cast<size_t>(ring));
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float* ring_k = a.ring_k + (c * a.heads + h) * ring * d;
  float* ring_v = a.ring_v + (c * a.heads + h) * ring * d;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t row = ((c * a.tokens + t) * a.heads + h) * d;
    const int64_t p = a.start[c] + t;
    std::copy(a.k + row, a.k + row + d, ring_k + (p % ring) * d);
    std::copy(a.v + row, a.v + row + d, ring_v + (p % ring) * d);
    const int64_t window_start = (p / w) * w - w, first = std::max<int64_t>(0, window_start);
    RotateRow(a, a.q + row, p - window_start, scale, query.data());
    for (int64_t j = first; j <= p; ++j) {
      RotateRow(a, ring_k + (j % ring) * d, j - window_start, 1.0f, key.data());
      float score = 0.0f;
      for (int64_t i = 0; i < d; ++i) score += query[i] * key[i];
      scores[j - first] = score;
    }
    SoftmaxWeightedSum(
        scores.data(), p - first + 1, d,
        [&](int64_t j) { return ring_v + ((first + j) % ring) * d; }, a.out + row);
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
  at::parallel_for(0, sequences * heads, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) ScanRingHead(args, i / heads, i % heads);
  });
  return out;
}

}  // namespace performer::kernels::cpu
