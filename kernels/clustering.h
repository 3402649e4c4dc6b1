// Hamming k-means over hash codes, the clustering step of clustered
// attention (fast-transformers' clustering.hamming.cluster).
//
//   ClusterHashes(hashes (N,H,L) int64, lengths (N,) int, centroid_positions (C,) int64,
//                 iterations, bits, generator = default CPU generator)
//       -> {groups (N,H,L) int64, counts (N,H,C) int64}
//
// Per (n, h), over the first lengths[n] codes only:
//   * the initial centroids are the codes at centroid_positions (the same
//     positions for every (n, h); they may point at padded positions);
//   * (iterations - 1) times: assign every code to the centroid with the
//     smallest popcount(code XOR centroid), ties to the lowest index; then
//     recompute each centroid bit by bit as the majority of its members (bit
//     set iff strictly more members have it set than not). A cluster without
//     members gets a uniformly random `bits`-bit value;
//   * a final assignment gives groups; counts[n,h,c] = members of cluster c.
// Codes past lengths[n] get the invalid group id C + 1 (as the reference) and
// are not counted; every consumer of groups skips ids outside [0, C).
//
// Randomness: the reference kernel draws empty-cluster replacements from
// std::random_device, which cannot be seeded. Here one 62-bit seed per (n, h)
// is drawn from `generator` (torch's default CPU generator when absent, so
// torch::manual_seed makes the result reproducible) before the parallel loop,
// and each (n, h) draws its replacements from a std::mt19937_64 seeded with
// it: results do not depend on the number of threads.
//
// bits must be in [1, 63]; only the low `bits` bits of the codes are used.
// iterations >= 0 (0 and 1 both mean: assign to the initial centroids).
// Not differentiable. CPU and CUDA (kernels/cuda/clustering_cuda.h): the
// seeds are drawn on the CPU from `generator` in both cases and the CUDA
// kernel replays std::mt19937_64, so both devices give identical groups and
// counts for the same generator state. All tensors on one device.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/util/Optional.h>
#include <torch/types.h>

#include <cstdint>

namespace performer::kernels {

struct HashClusters {
  torch::Tensor groups;  // (N, H, L) int64; C + 1 past the sequence length.
  torch::Tensor counts;  // (N, H, C) int64.
};

HashClusters ClusterHashes(const torch::Tensor& hashes, const torch::Tensor& lengths,
                           const torch::Tensor& centroid_positions, int64_t iterations,
                           int64_t bits, c10::optional<at::Generator> generator = c10::nullopt);

}  // namespace performer::kernels
