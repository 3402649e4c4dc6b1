// WindowedLocalAttention: the local attention heads of performer-pytorch,
// as it builds them with local-attention 1.11.x (docs/reference/
// performer-pytorch.md §6); not fast-transformers' "local" type
// (local_attention.h: a band of local_context keys around each query, no
// ring state). Windows of w positions
// aligned at 0, look back one window (and forward one when non-causal),
// autopad, q scaled by d^-1/2, half-split rotary over window-relative slots
// (queries take the last w slots, so non-causal offsets are shifted by one
// window: a 1.11.x property reproduced on purpose), missing neighbour windows
// filled with -1 and masked, masked scores set to -FLT_MAX before the softmax.
//
// The rotary frequencies are the loaded buffer "rel_pos.inv_freq". Dropout
// on the attention weights acts in training mode only.
// Step() is the causal incremental form: a ring of the raw keys/values of
// the last 2w positions per row (entry = position mod 2w); a query at
// position p sees positions max(0, (p/w - 1) w) .. p with the same slots.
// Where kernels::WindowedRingAttentionSupported (float32 rings on the CPU,
// or on CUDA under kernels::CudaRowInvariance()), Step() and Extend() run
// kernels/windowed_ring_attention.h, one loop per (sequence, head) that feeds
// tokens in order with every sum in position order, so a token's output is
// the same bits however its sequence was fed (prompt chunks or steps) and
// whatever shares the call; otherwise they are tensor ops.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace performer {

class WindowedLocalAttentionImpl : public torch::nn::Module {
 public:
  WindowedLocalAttentionImpl(int64_t dim_head, int64_t window_size, bool causal,
                             double dropout = 0.0);

  // q, k, v [b, lh, n, d]; mask [b, n] bool (true = real) or undefined.
  torch::Tensor forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                        const torch::Tensor& mask = {});

  // q, k, v [B, lh, d] at positions [B] (int64); ring_k/ring_v [B, lh, 2w, d]
  // updated in place. Causal only.
  torch::Tensor Step(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& positions, const torch::Tensor& ring_k,
                     const torch::Tensor& ring_v) const;
  // n consecutive positions start .. start + n - 1 of ONE sequence: q, k, v
  // [1, lh, n, d] against the ring [1, lh, 2w, d] of the positions before
  // (updated in place). Runs forward() over the window-aligned span from
  // the window before start's (whose keys the ring holds), so it computes
  // what n Step() calls would. Causal only.
  torch::Tensor Extend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                       int64_t start, const torch::Tensor& ring_k, const torch::Tensor& ring_v);
  // Writes the last <= 2w positions of k, v [B, lh, n, d] into the rings.
  void InitRing(const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& ring_k,
                const torch::Tensor& ring_v) const;

  // Makes the ring loop's rotary tables (the cos and sin of every
  // window-relative slot, from inv_freq as it is now, on inv_freq's device)
  // once instead of on every Step and Extend; the same bits either way.
  // Call after loading and moving the module.
  void PrepareForDecoding();

  int64_t window_size() const { return window_size_; }

 private:
  struct RingTables {
    torch::Tensor cos, sin;  // [2w, d] float32, computed on the CPU
  };
  // On `device`.
  RingTables MakeRingTables(const torch::Device& device) const;

  // The ring loop's form of Step and Extend: q, k, v [C, T, lh, d], start
  // [C] (int64, each sequence's first position), rings [C, lh, 2w, d].
  torch::Tensor RingAttention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& start,
                              const torch::Tensor& ring_k, const torch::Tensor& ring_v) const;
  torch::Tensor StepTensorOps(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& positions,
                              const torch::Tensor& ring_k, const torch::Tensor& ring_v) const;
  torch::Tensor ExtendTensorOps(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, int64_t start, const torch::Tensor& ring_k,
                                const torch::Tensor& ring_v);

  int64_t window_size_;
  bool causal_;
  double dropout_;
  torch::Tensor inv_freq_;
  RingTables ring_tables_;  // PrepareForDecoding; undefined: made per call
};
TORCH_MODULE(WindowedLocalAttention);

}  // namespace performer
