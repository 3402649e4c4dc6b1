#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "kernels/cuda/float_conversion.cuh"
#include "kernels/cuda/fused_linear_cuda.h"
#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/row_statistics.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kThreads = kWarpsPerBlock * 32;
// Shared memory a block may use for its rows of x without opting in.
constexpr int64_t kDefaultSharedBytes = 48 * 1024;

// The shared rows of x, normalised in place when the layer has a norm: a
// warp per row (RowStatistics over `in` floats in shared memory).
__device__ void NormalizeRows(const FusedLinearArgs& a, float* xs, int rows) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t in = a.in;
  for (int r = warp; r < rows; r += kWarpsPerBlock) {
    float* row = xs + r * in;
    const float2 stats = RowStatistics(row, in, a.norm_eps, lane);
    for (int64_t i = lane; i < in; i += 32) {
      const float b = a.norm_bias != nullptr ? a.norm_bias[i] : 0.0f;
      row[i] = LayerNormElement(row[i], stats, a.norm_weight[i], b);
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
  // grid.y is at most 65535 blocks: more rows go in slices of that many
  // blocks (each row's chain of operations is the same in any slice).
  constexpr int64_t kMaxRowsPerLaunch = int64_t{65535} * R;
  for (int64_t first = 0; first < a.rows; first += kMaxRowsPerLaunch) {
    FusedLinearArgs slice = a;
    slice.rows = a.rows - first < kMaxRowsPerLaunch ? a.rows - first : kMaxRowsPerLaunch;
    slice.x = a.x + first * a.in;
    slice.y = a.y + first * a.out;
    if (a.residual != nullptr) slice.residual = a.residual + first * a.out;
    const dim3 grid(static_cast<unsigned>((a.out + kWarpsPerBlock - 1) / kWarpsPerBlock),
                    static_cast<unsigned>((slice.rows + R - 1) / R));
    kernel<<<grid, kThreads, static_cast<size_t>(bytes), stream>>>(slice);
    if (const char* error = LaunchError()) return error;
  }
  return nullptr;
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

// The tensor-core kernel (FusedLinearMmaForward): a block of 4 warps owns a
// tile of 32 rows x 32 outputs; warp w computes the 16 x 16 fragment at rows
// 16 (w % 2), outputs 16 (w / 2). Per pass of 64 inputs the block stages its
// rows of x (normalised, zeros past the batch) as hi = bf16(x) and lo =
// bf16(x - hi) in shared memory; each warp loads its weight fragment straight
// from global memory (W (out, in) row-major is the column-major K x N
// operand) and accumulates lo W + hi W in float32. The accumulators go
// through shared memory to the epilogue.
constexpr int kMmaTile = 16;                 // wmma m = n = k
constexpr int kMmaTileRows = 32;             // rows of x per block
constexpr int kMmaTileCols = 32;             // outputs per block
constexpr int kMmaChunk = 64;                // inputs staged per pass
constexpr int kMmaLd = kMmaChunk + 8;        // bf16 per staged row: a multiple of 8
constexpr int kMmaOutLd = kMmaTileCols + 4;  // floats per row of the output tile

__global__ void __launch_bounds__(kThreads) FusedLinearMmaKernel(FusedLinearArgs a) {
  namespace wmma = nvcuda::wmma;
  __shared__ __align__(32) __nv_bfloat16 hi[kMmaTileRows * kMmaLd];
  __shared__ __align__(32) __nv_bfloat16 lo[kMmaTileRows * kMmaLd];
  __shared__ __align__(32) float out_tile[kMmaTileRows * kMmaOutLd];
  __shared__ float mean_s[kMmaTileRows];
  __shared__ float rstd_s[kMmaTileRows];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int64_t in = a.in;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kMmaTileRows;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kMmaTileCols;
  const int rows = static_cast<int>(a.rows - row0 < kMmaTileRows ? a.rows - row0 : kMmaTileRows);
  if (a.norm_weight != nullptr) {
    // LayerNorm's statistics of the block's rows, a warp per row.
    for (int r = warp; r < rows; r += kWarpsPerBlock) {
      const float2 stats = RowStatistics(a.x + (row0 + r) * in, in, a.norm_eps, lane);
      if (lane == 0) {
        mean_s[r] = stats.x;
        rstd_s[r] = stats.y;
      }
    }
    __syncthreads();
  }
  const int warp_row = (warp % 2) * kMmaTile;
  const int warp_col = (warp / 2) * kMmaTile;
  const int64_t o0 = col0 + warp_col;
  const bool active = o0 < a.out;  // out % 16 == 0: whole fragments (warp-uniform)
  const __nv_bfloat16* w = static_cast<const __nv_bfloat16*>(a.weight) + (active ? o0 : 0) * in;
  wmma::fragment<wmma::accumulator, kMmaTile, kMmaTile, kMmaTile, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int64_t k0 = 0; k0 < in; k0 += kMmaChunk) {
    const int width = static_cast<int>(in - k0 < kMmaChunk ? in - k0 : kMmaChunk);  // % 16 == 0
    for (int e = tid; e < kMmaTileRows * kMmaChunk; e += kThreads) {
      const int r = e / kMmaChunk, c = e % kMmaChunk;
      float v = 0.0f;
      if (r < rows && c < width) {
        const int64_t i = k0 + c;
        v = a.x[(row0 + r) * in + i];
        if (a.norm_weight != nullptr) {
          const float b = a.norm_bias != nullptr ? a.norm_bias[i] : 0.0f;
          v = LayerNormElement(v, make_float2(mean_s[r], rstd_s[r]), a.norm_weight[i], b);
        }
      }
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      hi[r * kMmaLd + c] = h;
      lo[r * kMmaLd + c] = __float2bfloat16_rn(v - __bfloat162float(h));
    }
    __syncthreads();
    if (active) {
      for (int kk = 0; kk < width; kk += kMmaTile) {
        wmma::fragment<wmma::matrix_b, kMmaTile, kMmaTile, kMmaTile, __nv_bfloat16, wmma::col_major>
            b;
        wmma::load_matrix_sync(b, w + k0 + kk, static_cast<unsigned>(in));
        wmma::fragment<wmma::matrix_a, kMmaTile, kMmaTile, kMmaTile, __nv_bfloat16, wmma::row_major>
            x_hi, x_lo;
        wmma::load_matrix_sync(x_lo, lo + warp_row * kMmaLd + kk, kMmaLd);
        wmma::load_matrix_sync(x_hi, hi + warp_row * kMmaLd + kk, kMmaLd);
        wmma::mma_sync(acc, x_lo, b, acc);
        wmma::mma_sync(acc, x_hi, b, acc);
      }
    }
    __syncthreads();  // before the next pass overwrites hi and lo
  }
  if (active) {
    wmma::store_matrix_sync(out_tile + warp_row * kMmaOutLd + warp_col, acc, kMmaOutLd,
                            wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = tid; e < kMmaTileRows * kMmaTileCols; e += kThreads) {
    const int r = e / kMmaTileCols, c = e % kMmaTileCols;
    const int64_t o = col0 + c;
    if (r >= rows || o >= a.out) continue;
    float v = out_tile[r * kMmaOutLd + c] + (a.bias != nullptr ? a.bias[o] : 0.0f);
    if (a.gelu) v = Gelu(v);
    const int64_t at = (row0 + r) * a.out + o;
    if (a.residual != nullptr) v += a.residual[at];
    a.y[at] = v;
  }
}

}  // namespace

const char* FusedLinearForward(const FusedLinearArgs& a, void* stream) {
  if (a.rows == 0 || a.out == 0) return nullptr;
  const auto s = static_cast<cudaStream_t>(stream);
  return a.weight_type == FusedWeightType::kBFloat16 ? LaunchWeights<__nv_bfloat16>(a, s)
                                                     : LaunchWeights<float>(a, s);
}

bool FusedLinearMmaSupported(const FusedLinearArgs& a) {
  return a.weight_type == FusedWeightType::kBFloat16 && a.in % kMmaTile == 0 &&
         a.out % kMmaTile == 0 && reinterpret_cast<uintptr_t>(a.weight) % 32 == 0;
}

const char* FusedLinearMmaForward(const FusedLinearArgs& a, void* stream) {
  if (!FusedLinearMmaSupported(a)) {
    return "FusedLinearMmaForward: needs bfloat16 weights, in and out multiples of 16 and "
           "32-byte aligned weights";
  }
  if (a.rows == 0 || a.out == 0) return nullptr;
  const dim3 grid(static_cast<unsigned>((a.out + kMmaTileCols - 1) / kMmaTileCols),
                  static_cast<unsigned>((a.rows + kMmaTileRows - 1) / kMmaTileRows));
  FusedLinearMmaKernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return LaunchError();
}

}  // namespace performer::kernels::cuda
