// CPU implementation of the causal dot product (see kernels/causal_product.h
// for the op and its autograd entry point).
//
//   forward:  out_l = sum_{j <= l} (q_l . k_j) v_j
//   backward: dQ_l = sum_{j <= l} (g_l . v_j) k_j
//             dK_l = sum_{i >= l} (v_l . g_i) q_i
//             dV_l = sum_{i >= l} (k_l . q_i) g_i
//
// Each of the four is one sweep over the sequence that keeps a running outer
// product sum (E x M or M x E) per (n, h): O(L * E * M) time, O(E * M) scratch
// per thread, no L x E x M intermediate. Work is split over N * H with
// at::parallel_for. Inputs: contiguous CPU tensors of one floating dtype
// (float32 or float64), Q and K (N, H, L, E), V (N, H, L, M), G (N, H, L, M).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

torch::Tensor CausalDotProductForward(const torch::Tensor& queries, const torch::Tensor& keys,
                                      const torch::Tensor& values);

struct CausalDotProductGrads {
  torch::Tensor queries;
  torch::Tensor keys;
  torch::Tensor values;
};

// Gradients of sum(grad_out * forward(Q, K, V)). Those whose flag is false
// are left undefined.
CausalDotProductGrads CausalDotProductBackward(const torch::Tensor& queries,
                                               const torch::Tensor& keys,
                                               const torch::Tensor& values,
                                               const torch::Tensor& grad_out, bool need_queries,
                                               bool need_keys, bool need_values);

}  // namespace performer::kernels::cpu
