#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/float_conversion.cuh"
#include "kernels/cuda/fused_linear_cuda.h"
#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * 32;
// Shared memory a block may use for its rows of x without opting in.
constexpr int64_t kDefaultSharedBytes = 48 * 1024;

// The shared rows of x, normalised in place when the layer has a norm: a
// warp per row; the mean first, then the variance about it (as LayerNorm's
// two-pass reference), both over `in` floats in shared memory.
__device__ void NormalizeRows(const FusedLinearArgs& a, float* xs, int rows) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t in = a.in;
  for (int r = warp; r < rows; r += kWarpsPerBlock) {
    float* row = xs + r * in;
    float sum = 0.0f;
    for (int64_t i = lane; i < in; i += 32) sum += row[i];
    const float mean = WarpSum(sum) / static_cast<float>(in);
    float squares = 0.0f;
    for (int64_t i = lane; i < in; i += 32) {
      const float d = row[i] - mean;
      squares += d * d;
    }
    const float rstd = rsqrtf(WarpSum(squares) / static_cast<float>(in) + a.norm_eps);
    for (int64_t i = lane; i < in; i += 32) {
      const float b = a.norm_bias != nullptr ? a.norm_bias[i] : 0.0f;
      row[i] = (row[i] - mean) * rstd * a.norm_weight[i] + b;
    }
  }
}

// Sixteen bytes of weights (4 floats or 8 bf16) widened to float32.
template <typename W>
struct Vector;
template <>
struct Vector<float> {
  static constexpr int kWidth = 4;
  __device__ static void Widen(uint4 v, float* w) {
    w[0] = __uint_as_float(v.x);
    w[1] = __uint_as_float(v.y);
    w[2] = __uint_as_float(v.z);
    w[3] = __uint_as_float(v.w);
  }
};
template <>
struct Vector<__nv_bfloat16> {
  static constexpr int kWidth = 8;
  __device__ static void Widen(uint4 v, float* w) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w[2 * j] = __uint_as_float(words[j] << 16);
      w[2 * j + 1] = __uint_as_float(words[j] & 0xffff0000u);
    }
  }
};

__device__ __forceinline__ float Gelu(float v) {
  return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// 16-byte vectors of a weight row each lane holds in registers at once: the
// row's loads are issued together (before x is staged, for the first
// chunk), so a small batch waits about one memory latency per chunk.
constexpr int kChunk = 8;

// Loads chunk c of the row's vectors (vector j = (c kChunk + k) 32 + lane,
// coalesced across the warp) into raw; vectors past the row are not loaded.
__device__ __forceinline__ void LoadChunk(const uint4* row, int64_t vectors, int64_t c, int lane,
                                          uint4* raw) {
#pragma unroll
  for (int k = 0; k < kChunk; ++k) {
    const int64_t j = (c * kChunk + k) * 32 + lane;
    if (j < vectors) raw[k] = __ldg(row + j);
  }
}

// The R rows' dot products with one weight row, 16-byte vectors (in a
// multiple of the vector width, the weights 16-byte aligned).
template <typename W, int R>
__device__ void DotVectors(const W* w, const float* xs, int64_t in, int lane, uint4* raw,
                           float* acc) {
  constexpr int V = Vector<W>::kWidth;
  const int64_t vectors = in / V;
  const uint4* row = reinterpret_cast<const uint4*>(w);
  for (int64_t c = 0; c * kChunk * 32 < vectors; ++c) {
    if (c > 0) LoadChunk(row, vectors, c, lane, raw);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int64_t j = (c * kChunk + k) * 32 + lane;
      if (j >= vectors) break;
      float wv[V];
      Vector<W>::Widen(raw[k], wv);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float4* xr = reinterpret_cast<const float4*>(xs + r * in + j * V);
#pragma unroll
        for (int q = 0; q < V / 4; ++q) {
          const float4 x4 = xr[q];
          acc[r] = fmaf(wv[4 * q], x4.x, acc[r]);
          acc[r] = fmaf(wv[4 * q + 1], x4.y, acc[r]);
          acc[r] = fmaf(wv[4 * q + 2], x4.z, acc[r]);
          acc[r] = fmaf(wv[4 * q + 3], x4.w, acc[r]);
        }
      }
    }
  }
}

// The same one element per lane per step (any `in`, any alignment).
template <typename W, int R>
__device__ void DotElements(const W* w, const float* xs, int64_t in, int lane, float* acc) {
  for (int64_t i = lane; i < in; i += 32) {
    const float wi = ToFloat(w[i]);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = fmaf(wi, xs[r * in + i], acc[r]);
  }
}

template <typename W, int R, bool kVector>
__global__ void __launch_bounds__(kThreads) FusedLinearKernel(FusedLinearArgs a) {
  extern __shared__ float4 shared[];  // R rows of in floats
  float* xs = reinterpret_cast<float*>(shared);
  const int64_t in = a.in;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * R;
  const int rows = static_cast<int>(a.rows - row0 < R ? a.rows - row0 : R);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  const bool active = o < a.out;
  const W* w = static_cast<const W*>(a.weight) + (active ? o : 0) * in;
  [[maybe_unused]] uint4 raw[kChunk];
  if constexpr (kVector) {
    if (active) LoadChunk(reinterpret_cast<const uint4*>(w), in / Vector<W>::kWidth, 0, lane, raw);
  }
  for (int64_t i = tid; i < R * in; i += kThreads) {
    xs[i] = i < rows * in ? a.x[row0 * in + i] : 0.0f;
  }
  __syncthreads();
  if (a.norm_weight != nullptr) {
    NormalizeRows(a, xs, rows);
    __syncthreads();
  }
  if (!active) return;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  if constexpr (kVector) {
    DotVectors<W, R>(w, xs, in, lane, raw, acc);
  } else {
    DotElements<W, R>(w, xs, in, lane, acc);
  }
  float mine = 0.0f;  // lane r keeps row r's sum
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float total = WarpSum(acc[r]);
    if (lane == r) mine = total;
  }
  if (lane >= rows) return;
  float v = mine + (a.bias != nullptr ? a.bias[o] : 0.0f);
  if (a.gelu) v = Gelu(v);
  const int64_t at = (row0 + lane) * a.out + o;
  if (a.residual != nullptr) v += a.residual[at];
  a.y[at] = v;
}

template <typename W, int R, bool kVector>
const char* LaunchRows(const FusedLinearArgs& a, cudaStream_t stream) {
  const int64_t bytes = static_cast<int64_t>(R) * a.in * static_cast<int64_t>(sizeof(float));
  auto kernel = FusedLinearKernel<W, R, kVector>;
  if (bytes > kDefaultSharedBytes) {
    const cudaError_t err = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    if (err != cudaSuccess) return cudaGetErrorString(err);
  }
  const dim3 grid(static_cast<unsigned>((a.out + kWarpsPerBlock - 1) / kWarpsPerBlock),
                  static_cast<unsigned>((a.rows + R - 1) / R));
  kernel<<<grid, kThreads, static_cast<size_t>(bytes), stream>>>(a);
  return LaunchError();
}

// Rows of x per block: up to 8 (each weight row is read once per block, so
// more rows per block read the weights fewer times), fewer for small
// batches, and fewer when 8 rows of x would take over 96 KiB.
int RowsPerBlock(const FusedLinearArgs& a) {
  int r = 8;
  while (r > 1 && (r / 2 >= a.rows || r * a.in * 4 > 96 * 1024)) r /= 2;
  return r;
}

template <typename W, bool kVector>
const char* LaunchVector(const FusedLinearArgs& a, cudaStream_t stream) {
  switch (RowsPerBlock(a)) {
    case 1:
      return LaunchRows<W, 1, kVector>(a, stream);
    case 2:
      return LaunchRows<W, 2, kVector>(a, stream);
    case 4:
      return LaunchRows<W, 4, kVector>(a, stream);
    default:
      return LaunchRows<W, 8, kVector>(a, stream);
  }
}

template <typename W>
const char* LaunchWeights(const FusedLinearArgs& a, cudaStream_t stream) {
  constexpr int64_t kWidth = Vector<W>::kWidth;
  const bool vector = a.in % kWidth == 0 && reinterpret_cast<uintptr_t>(a.weight) % 16 == 0;
  return vector ? LaunchVector<W, true>(a, stream) : LaunchVector<W, false>(a, stream);
}

}  // namespace

const char* FusedLinearForward(const FusedLinearArgs& a, void* stream) {
  if (a.rows == 0 || a.out == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  return a.weight_type == FusedWeightType::kBFloat16 ? LaunchWeights<__nv_bfloat16>(a, s)
                                                     : LaunchWeights<float>(a, s);
}

}  // namespace performer::kernels::cuda
