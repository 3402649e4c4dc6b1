// Constant-size incremental-decoding state of a Performer layer stack
// (docs/reference/performer-pytorch.md §9.1), for a set of sequences: every
// tensor's first dimension is the sequence row. A pool allocates these once
// with `capacity` rows; a batched step works on a contiguous range of rows
// (views, no copies).
//
// Softmax-kernel global heads keep their sums in the frame of a running key
// maximum M (per row and head): with a_j = u_j - diag_j,
//   kv[..., f, :d] = sum_j exp(a_j - M) v_j,   kv[..., f, d] = sum_j exp(a_j - M)
//   v_sum[..., :d] = sum_j v_j,                v_sum[..., d] = t (tokens so far)
// so that sum_j k'_j v_j = r (kv[:d] + 1e-4 v_sum[:d]) and sum_j k'_j =
// r (kv[d] + 1e-4 t) exactly as the full forward with stabiliser M would
// have them; when M grows to M', kv is multiplied by exp(M - M').
// Generalized-kernel (and no-projection) heads keep plain sums in kv.
// Local heads keep the raw keys/values of the last 2 windows in a ring
// (entry = position mod 2w). Token shift keeps the previous position's
// normalised shifted piece. Cross attention keeps the constant encoder
// summary kv[..., f, :] = sum_j k'_j [v_j, 1].
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace performer::models {

struct SelfAttentionState {
  torch::Tensor key_max;  // [S, gh] float; softmax kernel only
  torch::Tensor kv;       // [S, gh, m, d + 1]
  torch::Tensor v_sum;    // [S, gh, d + 1]; softmax kernel only
  torch::Tensor local_k;  // [S, lh, 2w, d]
  torch::Tensor local_v;  // [S, lh, 2w, d]
};

struct CrossAttentionState {
  torch::Tensor kv;  // [S, h, m, d + 1]
};

// One (attention, feed-forward) pair of the stack, indexed like the
// reference's net.layers (self and cross pairs alternate in a decoder).
struct LayerState {
  SelfAttentionState self;
  CrossAttentionState cross;
  torch::Tensor attn_shift;  // [S, piece]; shift_tokens only
  torch::Tensor ff_shift;    // [S, piece]
};

struct DecodeState {
  std::vector<LayerState> layers;
  torch::Tensor positions;  // [S] int64: tokens consumed so far

  // Calls fn(tensor, value_of_an_empty_row) for every defined tensor.
  void ForEach(const std::function<void(torch::Tensor&, double)>& fn);
  void ForEach(const std::function<void(const torch::Tensor&, double)>& fn) const;

  int64_t rows() const { return positions.size(0); }
  // Rows [start, start + count) as views.
  DecodeState Rows(int64_t start, int64_t count) const;
  // Copies of the rows `index` (int64 [k]); and writing them back.
  DecodeState Gather(const torch::Tensor& index) const;
  void Scatter(const torch::Tensor& index, const DecodeState& rows);
  void CopyRow(int64_t from, int64_t to);
  // Puts rows [start, start + count) in the empty-sequence state.
  void ResetRows(int64_t start, int64_t count);
  // Exact bytes one row occupies (all tensors, positions included).
  int64_t BytesPerRow() const;
};

}  // namespace performer::models
