// CUDA random-hyperplane hashing (the op: kernels/hashing.h), raw pointers +
// shapes in:
//
//   codes[r] = sum_b [x[r] . planes[b, :E] > planes[b, E]] << b
//
// x (rows, E) and planes (bits, E + 1) contiguous device buffers of T (float
// or double), codes (rows,) int64; 1 <= bits <= 63.
//
// Bit-exact with the CPU kernel (kernels/cpu/hashing_cpu.cc): each
// projection is summed in the same order (e = 0, 1, ..., E - 1) with
// separately rounded multiplies and adds (__fmul_rn / __fadd_rn, no FMA
// contraction), as the CPU loop compiles (ISO C++, no -ffp-contract=fast).
// One warp per row, 8 rows per 256-thread block: lane b (and b + 32) owns
// bit b, x[r, e] is a warp-wide broadcast, and the bits are gathered with
// __ballot_sync. The planes are staged in shared memory when they fit in
// 48 KB. Returns a CUDA error string or nullptr.
//
// Called by kernels/hashing.cc for CUDA tensors.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

template <typename T>
const char* ComputeHashesForward(const T* x, const T* planes, int64_t* codes, int64_t rows,
                                 int64_t dims, int64_t bits, void* stream);

}  // namespace performer::kernels::cuda
