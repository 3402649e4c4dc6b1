// The causal windowed attention of performer-pytorch's local heads over a
// ring of each head's last 2w raw keys and values, token by token
// (core/attention/windowed_local_attention.h holds its semantics): for C
// sequences of T consecutive tokens and H heads, each token of sequence c at
// position p = start[c] + t
//   enters its head's ring at entry p mod 2w (key and value, raw),
//   rotates its query, scaled by d^-1/2, to window-relative slot
//     p - window_start (window_start = (p / w - 1) w), and each visible key j
//     in max(0, window_start) .. p to slot j - window_start (the rotary of
//     each slot in cos, sin [2w, d]: half-split, as ApplyHalfRotary),
//   and gets the softmax of those scores over the visible values,
// each score and the softmax's sums in an order fixed by d and the token's
// window (the CPU's: kernels/cpu/attention_scores.h, softmax_weighted_sum.h).
// Steps (T = 1) and prompts (any T) run this one loop, so a token's output
// does not depend on how its sequence was fed or on the other sequences of
// the call.
//
// q, k, v [C, T, H, d]; start [C] int64; ring_k, ring_v [C, H, 2w, d]
// contiguous float32, updated in place; all on one device. Returns [C, T, H,
// d] float32. Inference only.
// CPU (kernels/cpu/windowed_ring_attention_cpu.cc): the threads split
// (sequence, head) pairs, never a pair's tokens. CUDA (kernels/cuda/
// windowed_ring_attention_cuda.cu): one warp per pair, only under
// kernels::CudaRowInvariance() (WindowedRingAttentionSupported).
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor WindowedRingAttention(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& start,
                                    const torch::Tensor& ring_k, const torch::Tensor& ring_v,
                                    const torch::Tensor& cos, const torch::Tensor& sin);

// True when WindowedRingAttention runs for these rings: contiguous float32
// on the CPU, or on a CUDA device under kernels::CudaRowInvariance() when
// this build compiled kernels/cuda.
bool WindowedRingAttentionSupported(const torch::Tensor& ring_k, const torch::Tensor& ring_v);

}  // namespace performer::kernels
