// Clustered sparse products, the kernels of the top-k part of improved
// clustered attention (fast-transformers' clustered_sparse_dot_product and
// clustered_sparse_weighted_average). Every query l of cluster g = groups[l]
// works on the k keys topk[g, 0..k) chosen for its cluster:
//
//   ClusteredSparseDotProduct(Q (N,H,L,E), K (N,H,S,E), topk (N,H,C,k) int64,
//                             groups (N,H,L) int64) -> (N,H,L,k)
//       out[n,h,l,j] = Q[n,h,l] . K[n,h,topk[n,h,g,j]]
//   ClusteredSparseWeightedAverage(W (N,H,L,k), V (N,H,S,D), topk, groups) -> (N,H,L,D)
//       out[n,h,l] = sum_j W[n,h,l,j] V[n,h,topk[n,h,g,j]]
//
// Queries whose group id lies outside [0, C) (padded queries) get rows of
// exactly 0 and receive no gradient. Queries need not be sorted by cluster.
// topk entries must lie in [0, S) (checked). Differentiable (autograd) with
// respect to Q and K, resp. W and V; the backward passes gather and
// scatter-add through the same index lists. float32 or float64. CPU and CUDA
// (kernels/cuda/sparse_product_cuda.h; forward only: on CUDA an input that
// requires a gradient is refused). All tensors on one device.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor ClusteredSparseDotProduct(const torch::Tensor& queries, const torch::Tensor& keys,
                                        const torch::Tensor& topk, const torch::Tensor& groups);

torch::Tensor ClusteredSparseWeightedAverage(const torch::Tensor& weights,
                                             const torch::Tensor& values, const torch::Tensor& topk,
                                             const torch::Tensor& groups);

}  // namespace performer::kernels
