// CUDA kernel of kernels/windowed_ring_attention.h, raw pointers + shapes
// in (contiguous float32 device buffers). One warp (a block of 32 threads)
// per (sequence, head) pair walks the pair's tokens in order; per token:
// the lanes write the key and value into the ring and stage the rotated
// query in shared memory; lane l scores the visible positions first + l,
// first + l + 32, ... (each a dot product over d in order) into shared
// memory; the warp takes the maximum, lane l exponentiates its scores and
// sums them in its order, the warp adds the lanes' sums by a fixed butterfly;
// then lane l forms output dims l, l + 32, ... over the positions in order.
// Every assignment depends only on the position, never on T, C or the
// other pairs, so a token's bits are the same in a step and in a prompt.
// Shared memory: d + 2w floats. Returns a CUDA error string or nullptr.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

struct WindowedRingAttentionArgs {
  const float* q;        // [C, T, H, d]
  const float* k;        // [C, T, H, d]
  const float* v;        // [C, T, H, d]
  const int64_t* start;  // [C]
  float* ring_k;         // [C, H, 2w, d]
  float* ring_v;         // [C, H, 2w, d]
  const float* cos;      // [2w, d]
  const float* sin;      // [2w, d]
  float* out;            // [C, T, H, d]
  int64_t sequences, tokens, heads, d, w;
  float query_scale;  // d^-1/2
};

// The largest d + 2w the kernel's shared memory takes.
constexpr int64_t kMaxRingAttentionSharedFloats = int64_t{12} * 1024;

const char* WindowedRingAttentionForward(const WindowedRingAttentionArgs& args, void* stream);

}  // namespace performer::kernels::cuda
