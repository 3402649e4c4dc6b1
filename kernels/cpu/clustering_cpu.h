// CPU implementation of ClusterHashes (kernels/clustering.h). Expects checked,
// contiguous int64 inputs and one seed per (n, h) (seeds (N*H,) int64).
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "kernels/clustering.h"

namespace performer::kernels::cpu {

HashClusters ClusterHashesCpu(const torch::Tensor& hashes, const torch::Tensor& lengths,
                              const torch::Tensor& centroid_positions, int64_t iterations,
                              int64_t bits, const torch::Tensor& seeds);

}  // namespace performer::kernels::cpu
