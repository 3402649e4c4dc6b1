// CUDA per-cluster aggregation and broadcast (forward), raw pointers +
// shapes in (the ops: kernels/aggregate.h):
//
//   AggregateForward: y (BH, C, E)[c] = factors[b, c] * sum_{l: groups[b, l] = c} x[b, l]
//       x (BH, L, E), groups (BH, L) int64, factors (BH, C);
//   BroadcastForward: x (BH, L, E)[l] = factors[b, g] * y[b, g] with
//       g = groups[b, l], or 0 when g lies outside [0, C).
//
// T is float or double; all buffers contiguous on one device. Aggregate runs
// one warp per (b, tile of 32 columns): lane e walks the rows in order and
// adds row l into cluster groups[b, l]'s accumulator, which only that lane
// touches. So there are no atomics, the sums are taken in the CPU kernel's
// order (row 0 first) and the result does not change from run to run. The
// accumulators live in shared memory when C x 32 of them fit in 48 KB, else
// in y itself (the warp owns its slice). Broadcast runs one thread per
// output element. Returns a CUDA error string or nullptr.
//
// Called by kernels/aggregate.cc for CUDA tensors (inference).
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

template <typename T>
const char* AggregateForward(const T* x, const int64_t* groups, const T* factors, T* y,
                             int64_t batch_heads, int64_t length, int64_t clusters, int64_t dims,
                             void* stream);

template <typename T>
const char* BroadcastForward(const T* y, const int64_t* groups, const T* factors, T* x,
                             int64_t batch_heads, int64_t length, int64_t clusters, int64_t dims,
                             void* stream);

}  // namespace performer::kernels::cuda
