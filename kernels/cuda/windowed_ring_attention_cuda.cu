#include <cuda_runtime.h>

#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/cuda/windowed_ring_attention_cuda.h"

namespace performer::kernels::cuda {
namespace {

constexpr int kLanes = 32;

// Element i of scale * x rotated to a slot whose rotary rows are c, s
// (ApplyHalfRotary), as the CPU loop forms it.
__device__ __forceinline__ float RotatedElement(const float* x, int64_t i, int64_t d, float scale,
                                                const float* c, const float* s) {
  const int64_t half = d / 2;
  const float rotated = i < half ? -(x[i + half] * scale) : x[i - half] * scale;
  return __fadd_rn(__fmul_rn(__fmul_rn(x[i], scale), c[i]), __fmul_rn(rotated, s[i]));
}

__global__ void __launch_bounds__(kLanes) WindowedRingAttentionKernel(WindowedRingAttentionArgs a) {
  extern __shared__ float shared[];
  const int64_t d = a.d, w = a.w, ring = 2 * w;
  float* query = shared;       // d
  float* scores = shared + d;  // 2w
  const int64_t pair = blockIdx.x, c = pair / a.heads, h = pair % a.heads;
  const int lane = static_cast<int>(threadIdx.x);
  float* ring_k = a.ring_k + pair * ring * d;
  float* ring_v = a.ring_v + pair * ring * d;
  for (int64_t t = 0; t < a.tokens; ++t) {
    const int64_t row = ((c * a.tokens + t) * a.heads + h) * d;
    const int64_t p = a.start[c] + t;
    const int64_t entry = (p % ring) * d;
    for (int64_t i = lane; i < d; i += kLanes) {
      ring_k[entry + i] = a.k[row + i];
      ring_v[entry + i] = a.v[row + i];
    }
    const int64_t window_start = (p / w) * w - w;
    const int64_t first = window_start > 0 ? window_start : 0;
    const int64_t slot = p - window_start;
    for (int64_t i = lane; i < d; i += kLanes) {
      query[i] = RotatedElement(a.q + row, i, d, a.query_scale, a.cos + slot * d, a.sin + slot * d);
    }
    __syncwarp();
    float best = -3.402823466e+38f;
    for (int64_t j = first + lane; j <= p; j += kLanes) {
      const float* key = ring_k + (j % ring) * d;
      const float* kc = a.cos + (j - window_start) * d;
      const float* ks = a.sin + (j - window_start) * d;
      float score = 0.0f;
      for (int64_t i = 0; i < d; ++i) {
        score = __fadd_rn(score, __fmul_rn(query[i], RotatedElement(key, i, d, 1.0f, kc, ks)));
      }
      scores[j - first] = score;
      best = fmaxf(best, score);
    }
    best = WarpMax(best);
    float partial = 0.0f;
    for (int64_t j = first + lane; j <= p; j += kLanes) {
      const float e = expf(scores[j - first] - best);
      scores[j - first] = e;
      partial = __fadd_rn(partial, e);
    }
    const float total = WarpSum(partial);
    __syncwarp();
    for (int64_t i = lane; i < d; i += kLanes) {
      float acc = 0.0f;
      for (int64_t j = first; j <= p; ++j) {
        acc = __fadd_rn(acc,
                        __fmul_rn(__fdiv_rn(scores[j - first], total), ring_v[(j % ring) * d + i]));
      }
      a.out[row + i] = acc;
    }
    __syncwarp();
  }
}

}  // namespace

const char* WindowedRingAttentionForward(const WindowedRingAttentionArgs& args, void* stream) {
  if (args.d < 1 || args.w < 1 || args.heads < 1 || args.tokens < 0 || args.sequences < 0) {
    return "ring attention needs d, w, heads >= 1";
  }
  if (args.d + 2 * args.w > kMaxRingAttentionSharedFloats) {
    return "d + 2w too large for the ring attention kernel's shared memory";
  }
  const int64_t pairs = args.sequences * args.heads;
  if (pairs == 0 || args.tokens == 0) return nullptr;
  if (pairs > 0x7fffffff) return "too many (sequence, head) pairs for one grid";
  const size_t shared = sizeof(float) * static_cast<size_t>(args.d + 2 * args.w);
  WindowedRingAttentionKernel<<<static_cast<unsigned>(pairs), kLanes, shared,
                                static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchError();
}

}  // namespace performer::kernels::cuda
