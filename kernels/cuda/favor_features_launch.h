// Torch-facing launch of the CUDA FAVOR+ feature maps
// (kernels/cuda/favor_features_cuda.h). Called by kernels/favor_features.cc
// for CUDA tensors with data (G, L, D) and projection (M, D) already checked;
// float32, float16 and bfloat16 data are computed in place of dtype with fp32
// accumulation (any other floating dtype in float32), the projection is cast
// to the data's dtype. Returns (G, L, M) of the data's dtype.
#pragma once

#include <torch/types.h>

#include "kernels/cuda/favor_features_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor FavorFeaturesCuda(const torch::Tensor& data, const torch::Tensor& projection,
                                FavorMapKind map, double eps);

}  // namespace performer::kernels::cuda
