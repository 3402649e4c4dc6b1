// Plain LibTorch full softmax attention, the reference of the property tests of
// the randomized attentions (docs/reference/fast-transformers.md §11).
// Header-only.
#pragma once

#include <torch/torch.h>

#include <limits>

#include "core/masks.h"

namespace performer::testing {

// q (N,L,H,E), k (N,S,H,E), v (N,S,H,D) -> (N,L,H,D):
//   out[n,l,h] = sum_s softmax_s(t (q.k + mask))[s] v[n,s,h]
// key_keep (N,S) and attn_keep (L,S) are optional bool "keep" matrices; a
// dropped entry gets -inf.
inline torch::Tensor ReferenceSoftmaxAttention(const torch::Tensor& q, const torch::Tensor& k,
                                               const torch::Tensor& v, double temperature,
                                               const torch::Tensor& key_keep = {},
                                               const torch::Tensor& attn_keep = {}) {
  const double inf = std::numeric_limits<double>::infinity();
  torch::Tensor scores = torch::einsum("nlhe,nshe->nhls", {q, k});
  if (key_keep.defined()) {
    scores = scores.masked_fill(
        key_keep.logical_not().view({key_keep.size(0), 1, 1, key_keep.size(1)}), -inf);
  }
  if (attn_keep.defined()) {
    scores = scores.masked_fill(
        attn_keep.logical_not().view({1, 1, attn_keep.size(0), attn_keep.size(1)}), -inf);
  }
  torch::Tensor attention = torch::softmax(temperature * scores, -1);
  return torch::einsum("nhls,nshd->nlhd", {attention, v});
}

// (N, M) bool: row n keeps the first lengths[n] positions.
inline torch::Tensor KeepFirst(const torch::Tensor& lengths, int64_t m) {
  return torch::arange(m, torch::kInt64).view({1, m}).lt(lengths.view({-1, 1}));
}

// A length mask keeping all `length` positions of each of the N samples.
inline Mask AllKeptLengths(int64_t length, int64_t batch = 2) {
  return Mask::Lengths(torch::full({batch}, length, torch::kInt64), length);
}

inline double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

}  // namespace performer::testing
