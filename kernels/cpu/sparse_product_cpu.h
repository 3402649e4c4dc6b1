// CPU implementations of the clustered sparse products
// (kernels/sparse_product.h) and their backward passes. Expect checked,
// contiguous inputs (topk and groups int64).
#pragma once

#include <torch/types.h>

#include <utility>

namespace performer::kernels::cpu {

torch::Tensor ClusteredSparseDotProductCpu(const torch::Tensor& queries, const torch::Tensor& keys,
                                           const torch::Tensor& topk, const torch::Tensor& groups);

// {grad_queries, grad_keys}; either is left undefined when not requested.
std::pair<torch::Tensor, torch::Tensor> ClusteredSparseDotProductBackwardCpu(
    const torch::Tensor& grad_out, const torch::Tensor& queries, const torch::Tensor& keys,
    const torch::Tensor& topk, const torch::Tensor& groups, bool need_queries, bool need_keys);

torch::Tensor ClusteredSparseWeightedAverageCpu(const torch::Tensor& weights,
                                                const torch::Tensor& values,
                                                const torch::Tensor& topk,
                                                const torch::Tensor& groups);

// {grad_weights, grad_values}; either is left undefined when not requested.
std::pair<torch::Tensor, torch::Tensor> ClusteredSparseWeightedAverageBackwardCpu(
    const torch::Tensor& grad_out, const torch::Tensor& weights, const torch::Tensor& values,
    const torch::Tensor& topk, const torch::Tensor& groups, bool need_weights, bool need_values);

}  // namespace performer::kernels::cpu
