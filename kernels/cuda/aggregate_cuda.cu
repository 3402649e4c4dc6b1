#include <cuda_runtime.h>

#include <climits>

#include "kernels/cuda/aggregate_cuda.h"
#include "kernels/cuda/launch_status.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kBroadcastThreads = 256;
// The static shared-memory limit of a block; larger accumulators stay in y.
constexpr int64_t kSharedBytes = 48 * 1024;

// One warp per (b, column tile). `accumulate_in_shared` picks where the
// C x 32 accumulators live (dynamic shared memory, or y's own slice).
template <typename T>
__global__ void __launch_bounds__(kWarp)
    AggregateKernel(const T* __restrict__ x, const int64_t* __restrict__ groups,
                    const T* __restrict__ factors, T* __restrict__ y, int64_t length,
                    int64_t clusters, int64_t dims, int64_t column_tiles,
                    bool accumulate_in_shared) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t b = static_cast<int64_t>(blockIdx.x) / column_tiles;
  const int64_t e = static_cast<int64_t>(blockIdx.x) % column_tiles * kWarp + lane;
  if (e >= dims) return;  // this lane's column does not exist; no lane waits for it
  T* y_column = y + b * clusters * dims + e;
  T* acc = y_column;
  int64_t stride = dims;
  if (accumulate_in_shared) {
    acc = reinterpret_cast<T*>(shared_bytes) + lane;
    stride = kWarp;
  }
  for (int64_t c = 0; c < clusters; ++c) acc[c * stride] = T(0);
  const int64_t* g_row = groups + b * length;
  const T* x_column = x + b * length * dims + e;
  for (int64_t l = 0; l < length; ++l) {
    const int64_t g = g_row[l];  // the same for every lane: one broadcast load
    if (g < 0 || g >= clusters) continue;
    acc[g * stride] += x_column[l * dims];
  }
  const T* f = factors + b * clusters;
  for (int64_t c = 0; c < clusters; ++c) y_column[c * dims] = acc[c * stride] * f[c];
}

template <typename T>
__global__ void __launch_bounds__(kBroadcastThreads)
    BroadcastKernel(const T* __restrict__ y, const int64_t* __restrict__ groups,
                    const T* __restrict__ factors, T* __restrict__ x, int64_t length,
                    int64_t clusters, int64_t dims, int64_t total) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int64_t row = i / dims;  // b * L + l
    const int64_t e = i % dims;
    const int64_t b = row / length;
    const int64_t g = groups[row];
    x[i] = (g < 0 || g >= clusters) ? T(0)
                                    : factors[b * clusters + g] * y[(b * clusters + g) * dims + e];
  }
}

}  // namespace

template <typename T>
const char* AggregateForward(const T* x, const int64_t* groups, const T* factors, T* y,
                             int64_t batch_heads, int64_t length, int64_t clusters, int64_t dims,
                             void* stream) {
  if (batch_heads == 0 || clusters == 0 || dims == 0) return nullptr;
  const int64_t column_tiles = (dims + kWarp - 1) / kWarp;
  if (batch_heads > INT_MAX / column_tiles) return "too many (batch, head) rows for one grid";
  const int64_t shared = clusters * kWarp * static_cast<int64_t>(sizeof(T));
  const bool in_shared = shared <= kSharedBytes;
  AggregateKernel<T>
      <<<static_cast<unsigned>(batch_heads * column_tiles), kWarp,
         in_shared ? static_cast<size_t>(shared) : 0, static_cast<cudaStream_t>(stream)>>>(
          x, groups, factors, y, length, clusters, dims, column_tiles, in_shared);
  return LaunchError();
}

template <typename T>
const char* BroadcastForward(const T* y, const int64_t* groups, const T* factors, T* x,
                             int64_t batch_heads, int64_t length, int64_t clusters, int64_t dims,
                             void* stream) {
  const int64_t total = batch_heads * length * dims;
  if (total == 0) return nullptr;
  // A grid-stride loop: enough blocks to fill any GPU, never more than the
  // elements need.
  const int64_t needed = (total + kBroadcastThreads - 1) / kBroadcastThreads;
  const unsigned blocks = static_cast<unsigned>(needed < 65536 ? needed : 65536);
  BroadcastKernel<T><<<blocks, kBroadcastThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      y, groups, factors, x, length, clusters, dims, total);
  return LaunchError();
}

template const char* AggregateForward<float>(const float*, const int64_t*, const float*, float*,
                                             int64_t, int64_t, int64_t, int64_t, void*);
template const char* AggregateForward<double>(const double*, const int64_t*, const double*, double*,
                                              int64_t, int64_t, int64_t, int64_t, void*);
template const char* BroadcastForward<float>(const float*, const int64_t*, const float*, float*,
                                             int64_t, int64_t, int64_t, int64_t, void*);
template const char* BroadcastForward<double>(const double*, const int64_t*, const double*, double*,
                                              int64_t, int64_t, int64_t, int64_t, void*);

}  // namespace performer::kernels::cuda
