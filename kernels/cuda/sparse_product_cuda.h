// CUDA clustered sparse products (forward), raw pointers + shapes in (the
// ops: kernels/sparse_product.h). Query row r = b * L + l of cluster
// g = groups[r] works on the k keys topk[b, g, 0..k):
//
//   ClusteredSparseDotProductForward: out (BH, L, k)[l, j] = q[b, l] . keys[b, topk[b, g, j]]
//       q (BH, L, E), keys (BH, S, E);
//   ClusteredSparseWeightedAverageForward: out (BH, L, D)[l] =
//       sum_j weights[b, l, j] values[b, topk[b, g, j]]; weights (BH, L, k), values (BH, S, D).
//
// topk (BH, C, k) and groups (BH, L) int64; a row whose group lies outside
// [0, C) gets zeros. The caller has checked that topk entries lie in [0, S).
// T is float or double; all buffers contiguous on one device. One warp per
// query row, 8 rows per 256-thread block: for the scores the lanes split E
// and reduce with shuffles, one key after another (coalesced key rows); for
// the average each lane owns columns d = lane + 32 i and walks the k keys
// (coalesced value rows, the weight broadcast). Returns a CUDA error string
// or nullptr.
//
// Called by kernels/sparse_product.cc for CUDA tensors (inference).
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

template <typename T>
const char* ClusteredSparseDotProductForward(const T* queries, const T* keys, const int64_t* topk,
                                             const int64_t* groups, T* out, int64_t batch_heads,
                                             int64_t length, int64_t key_count, int64_t clusters,
                                             int64_t top, int64_t dims, void* stream);

template <typename T>
const char* ClusteredSparseWeightedAverageForward(const T* weights, const T* values,
                                                  const int64_t* topk, const int64_t* groups,
                                                  T* out, int64_t batch_heads, int64_t length,
                                                  int64_t key_count, int64_t clusters, int64_t top,
                                                  int64_t dims, void* stream);

}  // namespace performer::kernels::cuda
