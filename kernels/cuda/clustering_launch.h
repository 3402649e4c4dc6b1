// Torch-facing launch of the CUDA Hamming k-means
// (kernels/cuda/clustering_cuda.h): hashes (N,H,L) int64, lengths (N,) int64,
// centroid_positions (C,) int64 and seeds (N*H,) int64, checked by
// kernels/clustering.cc and on one CUDA device -> groups (N,H,L) and counts
// (N,H,C) int64. Called by kernels/clustering.cc, which draws the seeds from
// the same CPU generator as the CPU path, so both give the same clusters.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "kernels/clustering.h"

namespace performer::kernels::cuda {

HashClusters ClusterHashesCuda(const torch::Tensor& hashes, const torch::Tensor& lengths,
                               const torch::Tensor& centroid_positions, int64_t iterations,
                               int64_t bits, const torch::Tensor& seeds);

}  // namespace performer::kernels::cuda
