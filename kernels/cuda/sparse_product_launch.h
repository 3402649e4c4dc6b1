// Torch-facing launch of the CUDA clustered sparse products
// (kernels/cuda/sparse_product_cuda.h), forward only, float32 and float64.
// Called by kernels/sparse_product.cc for CUDA tensors after its argument
// checks (shapes, dtypes, topk entries in [0, S)).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

// Q (N,H,L,E), K (N,H,S,E), topk (N,H,C,k), groups (N,H,L) -> (N,H,L,k).
torch::Tensor ClusteredSparseDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                            const torch::Tensor& topk, const torch::Tensor& groups);

// W (N,H,L,k), V (N,H,S,D), topk (N,H,C,k), groups (N,H,L) -> (N,H,L,D).
torch::Tensor ClusteredSparseWeightedAverageCuda(const torch::Tensor& weights,
                                                 const torch::Tensor& values,
                                                 const torch::Tensor& topk,
                                                 const torch::Tensor& groups);

}  // namespace performer::kernels::cuda
