// Torch-facing launch of the CUDA Aggregate / Broadcast kernels
// (kernels/cuda/aggregate_cuda.h), forward only, float32 and float64. Called
// by kernels/aggregate.cc for CUDA tensors after its argument checks.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

// X (N,H,L,E), groups (N,H,L) int64, factors (N,H,C) -> Y (N,H,C,E).
torch::Tensor AggregateCuda(const torch::Tensor& x, const torch::Tensor& groups,
                            const torch::Tensor& factors);

// Y (N,H,C,E), groups (N,H,L) int64, factors (N,H,C) -> X (N,H,L,E).
torch::Tensor BroadcastCuda(const torch::Tensor& y, const torch::Tensor& groups,
                            const torch::Tensor& factors);

}  // namespace performer::kernels::cuda
