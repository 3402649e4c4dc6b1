// Torch-facing launch of the CUDA local (banded) attention products
// (kernels/cuda/local_product_cuda.h), forward only. float32 and float64
// compute in their dtype; other floating dtypes compute in float32 and the
// result is cast back. Called by kernels/local_product.cc for CUDA tensors.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace performer::kernels::cuda {

// Q (N,H,L,E), K (N,H,S,E), attn_mask_finite (L,S), key_lengths (N,) -> (N,H,L,c).
torch::Tensor LocalDotProductCuda(const torch::Tensor& queries, const torch::Tensor& keys,
                                  const torch::Tensor& attn_mask_finite,
                                  const torch::Tensor& key_lengths, int64_t local_context);

// A (N,H,L,c), V (N,H,S,D) -> (N,H,L,D).
torch::Tensor LocalWeightedAverageCuda(const torch::Tensor& attention, const torch::Tensor& values);

}  // namespace performer::kernels::cuda
