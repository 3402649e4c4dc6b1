#include <cuda_runtime.h>

#include <climits>

#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/local_product_cuda.h"
#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;
// The value of every slot that holds no valid key (as the CPU kernel).
constexpr double kMaskedScore = -1e24;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    LocalDotProductKernel(const T* __restrict__ queries, const T* __restrict__ keys,
                          const T* __restrict__ mask, const int64_t* __restrict__ key_lengths,
                          T* __restrict__ scores, int64_t rows, int64_t heads, int64_t length,
                          int64_t key_count, int64_t dims, int64_t context) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  const int64_t b = row / length;
  const int64_t l = row % length;
  const int64_t half = context / 2;
  int64_t limit = key_lengths[b / heads];
  limit = limit < 0 ? 0 : (limit > key_count ? key_count : limit);
  const T* q = queries + row * dims;
  T* out = scores + row * context;
  for (int64_t slot = 0; slot < context; ++slot) {
    const int64_t s = l - half + slot;
    if (s < 0 || s >= limit) {  // uniform across the warp
      if (lane == 0) out[slot] = static_cast<T>(kMaskedScore);
      continue;
    }
    const T* k = keys + (b * key_count + s) * dims;
    T acc = 0;
    for (int64_t e = lane; e < dims; e += 32) acc += q[e] * k[e];
    acc = WarpSum(acc);
    if (lane == 0) out[slot] = acc + mask[l * key_count + s];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    LocalWeightedAverageKernel(const T* __restrict__ attention, const T* __restrict__ values,
                               T* __restrict__ out, int64_t rows, int64_t length, int64_t key_count,
                               int64_t dims, int64_t context) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int64_t b = row / length;
  const int64_t l = row % length;
  const int64_t half = context / 2;
  const int64_t first = l - half < 0 ? 0 : l - half;
  const int64_t end = l - half + context < key_count ? l - half + context : key_count;
  const T* a = attention + row * context;
  T* o = out + row * dims;
  for (int64_t d0 = 0; d0 < dims; d0 += 32) {
    const int64_t d = d0 + lane;
    T acc = 0;
    for (int64_t s = first; s < end; ++s) {
      const T weight = a[s - l + half];
      if (d < dims) acc += weight * values[(b * key_count + s) * dims + d];
    }
    if (d < dims) o[d] = acc;
  }
}

bool GridFits(int64_t rows) { return (rows + kRowsPerBlock - 1) / kRowsPerBlock <= INT_MAX; }

}  // namespace

template <typename T>
const char* LocalDotProductForward(const T* queries, const T* keys, const T* mask,
                                   const int64_t* key_lengths, T* scores, int64_t batch_heads,
                                   int64_t heads, int64_t length, int64_t key_count, int64_t dims,
                                   int64_t local_context, void* stream) {
  const int64_t rows = batch_heads * length;
  if (rows == 0 || local_context == 0) return nullptr;
  if (heads <= 0) return "heads must be positive";
  if (!GridFits(rows)) return "too many rows for one grid";
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  LocalDotProductKernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      queries, keys, mask, key_lengths, scores, rows, heads, length, key_count, dims,
      local_context);
  return LaunchError();
}

template <typename T>
const char* LocalWeightedAverageForward(const T* attention, const T* values, T* out,
                                        int64_t batch_heads, int64_t length, int64_t key_count,
                                        int64_t dims, int64_t local_context, void* stream) {
  const int64_t rows = batch_heads * length;
  if (rows == 0 || dims == 0) return nullptr;
  if (!GridFits(rows)) return "too many rows for one grid";
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  LocalWeightedAverageKernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      attention, values, out, rows, length, key_count, dims, local_context);
  return LaunchError();
}

template const char* LocalDotProductForward<float>(const float*, const float*, const float*,
                                                   const int64_t*, float*, int64_t, int64_t,
                                                   int64_t, int64_t, int64_t, int64_t, void*);
template const char* LocalDotProductForward<double>(const double*, const double*, const double*,
                                                    const int64_t*, double*, int64_t, int64_t,
                                                    int64_t, int64_t, int64_t, int64_t, void*);
template const char* LocalWeightedAverageForward<float>(const float*, const float*, float*, int64_t,
                                                        int64_t, int64_t, int64_t, int64_t, void*);
template const char* LocalWeightedAverageForward<double>(const double*, const double*, double*,
                                                         int64_t, int64_t, int64_t, int64_t,
                                                         int64_t, void*);

}  // namespace performer::kernels::cuda
