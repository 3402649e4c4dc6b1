// Causal softmax attention of new queries over their sequences' cached keys
// and values (fast-transformers' recurrent full attention in its slot form),
// a query at a time: for row r, token i and head h,
//
//   s_j = (q[r, i, h] . keys[r, j, h]) * temp     (the dot in an order fixed by E)
//   out[r, i, h] = sum_j softmax(s)_j values[r, j, h],  j = 0 .. last[r, i]
//
// every sum in the order of the keys (kernels/cpu/softmax_weighted_sum.h),
// so that a token's output is the same bits whether its sequence was fed
// token by token or in prompts of any size, and whatever the other rows.
// queries [N, n, H, E]; keys [N, T, H, E] and values [N, T, H, D] float32
// with their last two dimensions contiguous (a pool's window: any strides
// over N and T); last [N, n] int64 in [0, T) (checked on the CPU). Returns [N, n, H, D] float32.
// Inference only. Where CausalSoftmaxAttentionSupported: on the CPU
// (kernels/cpu/causal_softmax_attention_cpu.cc: the threads split (row,
// token, head) triples), and on CUDA under kernels::CudaRowInvariance()
// (kernels/cuda/causal_softmax_attention_cuda.cu: a warp per triple, an
// online softmax over the keys in order; not the CPU's bits, but as
// independent of the call).
#pragma once

#include <torch/types.h>

namespace performer::kernels {

bool CausalSoftmaxAttentionSupported(const torch::Tensor& keys, const torch::Tensor& values);

torch::Tensor CausalSoftmaxAttention(const torch::Tensor& queries, const torch::Tensor& keys,
                                     const torch::Tensor& values, const torch::Tensor& last,
                                     double temp);

}  // namespace performer::kernels
