// Local (banded) attention products, the kernels of LocalAttention.
//
// Window of query l for context c: keys s with l - floor(c/2) <= s < l + ceil(c/2)
// (slot k = s - l + floor(c/2)). For 0 <= s < key_lengths[n] a slot holds
// q_l . k_s + attn_mask_finite[l, s]; every other slot holds -1e24.
//
//   LocalDotProduct(Q (N,H,L,E), K (N,H,S,E), attn_mask_finite (L,S), key_lengths (N,) int64, c)
//       -> scores (N,H,L,c)
//   LocalWeightedAverage(A (N,H,L,c), V (N,H,S,D)) -> (N,H,L,D): sum over the
//       slots with 0 <= s < S of A[slot] * v_s.
// Both differentiable (autograd) with respect to Q, K, A and V (not the mask
// or the lengths); float32 or float64 on CPU, any strides; the mask is
// converted to the dtype of Q and the lengths to int64. key_lengths[n] > S
// counts as S. CUDA tensors run the forward kernels of
// kernels/cuda/local_product_cuda.h (inference only: refused under grad mode
// when an input requires grad; float32 / float64, other floating dtypes
// computed in float32); any other device is a c10::Error.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace performer::kernels {

torch::Tensor LocalDotProduct(const torch::Tensor& queries, const torch::Tensor& keys,
                              const torch::Tensor& attn_mask_finite,
                              const torch::Tensor& key_lengths, int64_t local_context);

torch::Tensor LocalWeightedAverage(const torch::Tensor& attention, const torch::Tensor& values);

}  // namespace performer::kernels
