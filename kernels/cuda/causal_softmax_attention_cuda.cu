#include <cuda_runtime.h>
#include <math_constants.h>

#include "kernels/cuda/causal_softmax_attention_cuda.h"
#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * 32;

// Warp w of block b attends (row, token, head) b * 4 + w (see the header).
// Shared memory per warp: query (E) | output (D).
__global__ void __launch_bounds__(kThreads)
    CausalSoftmaxAttentionKernel(CausalSoftmaxAttentionArgs a) {
  extern __shared__ float shared[];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (index >= a.rows * a.tokens * a.heads) return;  // a whole warp
  const int64_t e = a.e, d = a.d;
  const int64_t h = index % a.heads, token = index / a.heads, r = token / a.tokens;
  float* query = shared + warp * (e + d);
  float* out = query + e;
  for (int64_t i = lane; i < e; i += 32) query[i] = a.queries[index * e + i];
  for (int64_t i = lane; i < d; i += 32) out[i] = 0.0f;
  __syncwarp();
  const float* keys = a.keys + r * a.key_row + h * e;
  const float* values = a.values + r * a.value_row + h * d;
  const int64_t count = a.last[token] + 1;
  float best = -CUDART_INF_F, total = 0.0f;
  for (int64_t first = 0; first < count; first += 32) {
    const int64_t j = first + lane;
    float score = -CUDART_INF_F;
    if (j < count) {
      const float* key = keys + j * a.key_position;
      float dot = 0.0f;
      for (int64_t i = 0; i < e; ++i) dot = __fadd_rn(dot, __fmul_rn(query[i], key[i]));
      score = __fmul_rn(dot, a.temp);
    }
    const float next = fmaxf(best, WarpMax(score));
    const float rescale = expf(__fsub_rn(best, next));  // 0 for the first chunk
    const float weight = j < count ? expf(__fsub_rn(score, next)) : 0.0f;
    total = __fadd_rn(__fmul_rn(total, rescale), WarpSum(weight));
    best = next;
    const int64_t chunk = count - first < 32 ? count - first : 32;
    for (int64_t i = lane; i < d; i += 32) out[i] = __fmul_rn(out[i], rescale);
    // Every lane takes each weight (the shuffle needs the whole warp), then
    // adds it to the output elements it owns.
    for (int64_t b = 0; b < chunk; ++b) {
      const float w = __shfl_sync(0xffffffffu, weight, static_cast<int>(b));
      const float* value = values + (first + b) * a.value_position;
      for (int64_t i = lane; i < d; i += 32) out[i] = __fadd_rn(out[i], __fmul_rn(w, value[i]));
    }
  }
  __syncwarp();
  float* result = a.out + index * d;
  for (int64_t i = lane; i < d; i += 32) result[i] = __fdiv_rn(out[i], total);
}

}  // namespace

const char* CausalSoftmaxAttentionForward(const CausalSoftmaxAttentionArgs& args, void* stream) {
  if (args.e < 1 || args.d < 1 || args.heads < 1 || args.rows < 0 || args.tokens < 0) {
    return "causal softmax attention needs E, D and heads >= 1";
  }
  const int64_t floats = kWarpsPerBlock * (args.e + args.d);
  if (floats > kMaxCausalSoftmaxAttentionSharedFloats) {
    return "E + D too large for the causal softmax attention kernel's shared memory";
  }
  const int64_t triples = args.rows * args.tokens * args.heads;
  if (triples == 0) return nullptr;
  const int64_t blocks = (triples + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) return "too many (row, token, head) triples for one grid";
  CausalSoftmaxAttentionKernel<<<static_cast<unsigned>(blocks), kThreads,
                                 sizeof(float) * static_cast<size_t>(floats),
                                 static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchError();
}

}  // namespace performer::kernels::cuda
