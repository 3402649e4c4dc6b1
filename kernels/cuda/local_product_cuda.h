// CUDA local (banded) attention products (forward), raw pointers + shapes in
// (the ops and their window: kernels/local_product.h). With
// half = floor(c/2), after = ceil(c/2), query l sees keys
// l - half <= s < l + after in slots k = s - l + half.
//
//   LocalDotProductForward: scores (BH, L, c)[l, k] = q_l . k_s + mask[l, s]
//       for 0 <= s < min(key_lengths[b / heads], S), else -1e24;
//       q (BH, L, E), k (BH, S, E), mask (L, S), key_lengths (BH / heads,)
//       int64.
//   LocalWeightedAverageForward: out (BH, L, D)[l] = sum_{k: 0 <= s < S}
//       A[l, k] v_s; A (BH, L, c), v (BH, S, D).
// T is float or double; all buffers contiguous on one device. One warp per
// output row (b, l), 8 rows per 256-thread block: for the scores the lanes
// split E and reduce with shuffles, one slot after another (coalesced key
// rows); for the average each lane owns columns d = lane + 32 i and walks the
// slots (coalesced value rows, A broadcast). Returns a CUDA error string or
// nullptr.
//
// Called by kernels/local_product.cc for CUDA tensors (inference).
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

template <typename T>
const char* LocalDotProductForward(const T* queries, const T* keys, const T* mask,
                                   const int64_t* key_lengths, T* scores, int64_t batch_heads,
                                   int64_t heads, int64_t length, int64_t key_count, int64_t dims,
                                   int64_t local_context, void* stream);

template <typename T>
const char* LocalWeightedAverageForward(const T* attention, const T* values, T* out,
                                        int64_t batch_heads, int64_t length, int64_t key_count,
                                        int64_t dims, int64_t local_context, void* stream);

}  // namespace performer::kernels::cuda
