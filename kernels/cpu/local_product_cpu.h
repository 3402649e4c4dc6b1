// CPU implementation of the local (banded) attention products (see
// kernels/local_product.h for the ops, their window and their autograd entry
// points).
//
// With half = floor(c/2) and after = ceil(c/2), query l sees the keys
// l - half <= s < l + after in slots k = s - l + half.
//
//   LocalDotProductForward:   scores[l,k] = q_l . k_s + mask[l,s] for
//                             0 <= s < min(key_lengths[n], S), else -1e24
//   LocalDotProductBackward:  dQ_l = sum_k g[l,k] k_s,  dK_s = sum_l g[l,k] q_l
//                             (valid slots only)
//   LocalWeightedAverageForward:  out_l = sum_{k: 0 <= s < S} A[l,k] v_s
//   LocalWeightedAverageBackward: dA[l,k] = g_l . v_s (0 for s outside [0,S)),
//                                 dV_s = sum_l A[l,k] g_l
//
// Key-side gradients are gathered per key row (over the queries whose window
// contains it), so every output row has one writer and the work parallelises
// over (n, h, row) without atomics. Inputs: contiguous CPU tensors of one
// floating dtype (float32 or float64); key_lengths int64 (N,); the mask (L, S).
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace performer::kernels::cpu {

torch::Tensor LocalDotProductForward(const torch::Tensor& queries, const torch::Tensor& keys,
                                     const torch::Tensor& attn_mask_finite,
                                     const torch::Tensor& key_lengths, int64_t local_context);

struct LocalDotProductGrads {
  torch::Tensor queries;
  torch::Tensor keys;
};

// Gradients of sum(grad_scores * scores); those whose flag is false are left
// undefined. The mask and the lengths get none.
LocalDotProductGrads LocalDotProductBackward(
    const torch::Tensor& queries, const torch::Tensor& keys, const torch::Tensor& key_lengths,
    const torch::Tensor& grad_scores, int64_t local_context, bool need_queries, bool need_keys);

torch::Tensor LocalWeightedAverageForward(const torch::Tensor& attention,
                                          const torch::Tensor& values);

struct LocalWeightedAverageGrads {
  torch::Tensor attention;
  torch::Tensor values;
};

LocalWeightedAverageGrads LocalWeightedAverageBackward(const torch::Tensor& attention,
                                                       const torch::Tensor& values,
                                                       const torch::Tensor& grad_out,
                                                       bool need_attention, bool need_values);

}  // namespace performer::kernels::cpu
