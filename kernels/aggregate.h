// Per-cluster aggregation and broadcast, the bridges between queries and
// their cluster centroids in clustered attention (fast-transformers'
// aggregate / broadcast).
//
//   Aggregate(X (N,H,L,E), groups (N,H,L) int64, factors (N,H,C)) -> Y (N,H,C,E)
//       Y[n,h,c] = factors[n,h,c] * sum_{l : groups[n,h,l] = c} X[n,h,l]
//   Broadcast(Y (N,H,C,E), groups (N,H,L) int64, factors (N,H,C)) -> X (N,H,L,E)
//       X[n,h,l] = factors[n,h,g] * Y[n,h,g] with g = groups[n,h,l]
//
// Group ids outside [0, C) are skipped: they contribute nothing to Y and
// receive exactly 0 in X (padded queries carry such ids). Queries need not be
// sorted by cluster.
//
// Differentiable (autograd) with respect to X (Aggregate) and Y (Broadcast):
// each backward is the other operation with the same groups and factors.
// factors are constants: passing factors that require grad is an error.
// X/Y and factors share a floating dtype (float32 or float64). CPU and CUDA
// (kernels/cuda/aggregate_cuda.h; forward only: on CUDA an input that
// requires a gradient is refused). All tensors on one device.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor Aggregate(const torch::Tensor& x, const torch::Tensor& groups,
                        const torch::Tensor& factors);

torch::Tensor Broadcast(const torch::Tensor& y, const torch::Tensor& groups,
                        const torch::Tensor& factors);

}  // namespace performer::kernels
