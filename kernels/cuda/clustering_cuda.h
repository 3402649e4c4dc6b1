// CUDA Hamming k-means over hash codes (the op and its semantics:
// kernels/clustering.h), raw pointers + shapes in:
//
//   hashes (BH, L) int64, lengths (BH / heads,) int64 in [0, L],
//   centroid_positions (C,) int64 in [0, L), seeds (BH,) int64
//   -> groups (BH, L) int64 (C + 1 past the length), counts (BH, C) int64.
//
// Exactly the CPU kernel's clusters (kernels/cpu/clustering_cpu.cc), given
// the same seeds: all arithmetic is integer, distances are
// popcount(code XOR centroid) over all 64 bits, ties go to the lowest index,
// a centroid bit is set iff strictly more members have it than not, and an
// empty cluster takes the next draw of std::mt19937_64(seeds[b]) masked to
// `bits` bits, drawn in increasing cluster order (kernels/cuda/mt19937_64.h
// replays the CPU's generator on the device).
//
// One block of 256 threads per sequence b: the threads split the codes for
// the assignment, members and per-bit set counts are gathered with shared
// atomics, the threads split the clusters for the majority vote, and thread
// 0 draws the replacements of the empty clusters in order. Shared memory:
// C * (12 + 4 * bits) bytes + 2.5 KB of generator state, so C up to ~850 at
// 63 bits in sm_90's 227 KB per block; more returns an error. Returns a
// CUDA error string or nullptr.
//
// Called by kernels/clustering.cc for CUDA tensors.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

const char* ClusterHashesForward(const int64_t* hashes, const int64_t* lengths,
                                 const int64_t* centroid_positions, const int64_t* seeds,
                                 int64_t* groups, int64_t* counts, int64_t batch_heads,
                                 int64_t heads, int64_t length, int64_t clusters,
                                 int64_t iterations, int64_t bits, void* stream);

}  // namespace performer::kernels::cuda
