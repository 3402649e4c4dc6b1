// CPU kernel of kernels/favor_features.h. Inputs already validated:
// data (G, L, D) and projection (M, D) contiguous, one dtype, float32 or
// float64. u = (c x) P^T is one BLAS matmul (the tensor op core uses, so u
// is bitwise the same as core's); the stabilisers, exponentials and eps are
// one pass over u in place, split over rows (queries) or sequences (keys)
// with at::parallel_for. Returns (G, L, M).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

enum class FavorMap { kSoftmaxQuery, kSoftmaxKey, kGeneralizedRelu };

torch::Tensor FavorFeaturesForward(const torch::Tensor& data, const torch::Tensor& projection,
                                   FavorMap map, double eps);

}  // namespace performer::kernels::cpu
