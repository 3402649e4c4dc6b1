#include <cuda_runtime.h>

#include <climits>

#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/sparse_product_cuda.h"
#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;

// The top-k list of row `row`'s cluster, or nullptr when its group id is
// outside [0, C) (a padded query).
__device__ __forceinline__ const int64_t* TopkOf(const int64_t* topk, const int64_t* groups,
                                                 int64_t row, int64_t length, int64_t clusters,
                                                 int64_t top) {
  const int64_t g = groups[row];
  if (g < 0 || g >= clusters) return nullptr;
  return topk + (row / length * clusters + g) * top;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    DotProductKernel(const T* __restrict__ queries, const T* __restrict__ keys,
                     const int64_t* __restrict__ topk, const int64_t* __restrict__ groups,
                     T* __restrict__ out, int64_t rows, int64_t length, int64_t key_count,
                     int64_t clusters, int64_t top, int64_t dims) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // whole warps leave together
  T* o = out + row * top;
  const int64_t* list = TopkOf(topk, groups, row, length, clusters, top);
  if (list == nullptr) {
    for (int64_t j = lane; j < top; j += 32) o[j] = T(0);
    return;
  }
  const T* q = queries + row * dims;
  const T* keys_b = keys + row / length * key_count * dims;
  for (int64_t j = 0; j < top; ++j) {
    const T* k = keys_b + list[j] * dims;
    T acc = 0;
    for (int64_t e = lane; e < dims; e += 32) acc += q[e] * k[e];
    acc = WarpSum(acc);
    if (lane == 0) o[j] = acc;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    WeightedAverageKernel(const T* __restrict__ weights, const T* __restrict__ values,
                          const int64_t* __restrict__ topk, const int64_t* __restrict__ groups,
                          T* __restrict__ out, int64_t rows, int64_t length, int64_t key_count,
                          int64_t clusters, int64_t top, int64_t dims) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  T* o = out + row * dims;
  const int64_t* list = TopkOf(topk, groups, row, length, clusters, top);
  if (list == nullptr) {
    for (int64_t d = lane; d < dims; d += 32) o[d] = T(0);
    return;
  }
  const T* w = weights + row * top;
  const T* values_b = values + row / length * key_count * dims;
  for (int64_t d = lane; d < dims; d += 32) {
    T acc = 0;
    for (int64_t j = 0; j < top; ++j) acc += w[j] * values_b[list[j] * dims + d];
    o[d] = acc;
  }
}

// Blocks for `rows` warps, or 0 when they do not fit in one grid.
unsigned BlocksFor(int64_t rows) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  return blocks <= INT_MAX ? static_cast<unsigned>(blocks) : 0u;
}

}  // namespace

template <typename T>
const char* ClusteredSparseDotProductForward(const T* queries, const T* keys, const int64_t* topk,
                                             const int64_t* groups, T* out, int64_t batch_heads,
                                             int64_t length, int64_t key_count, int64_t clusters,
                                             int64_t top, int64_t dims, void* stream) {
  const int64_t rows = batch_heads * length;
  if (rows == 0 || top == 0) return nullptr;
  const unsigned blocks = BlocksFor(rows);
  if (blocks == 0) return "too many query rows for one grid";
  DotProductKernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      queries, keys, topk, groups, out, rows, length, key_count, clusters, top, dims);
  return LaunchError();
}

template <typename T>
const char* ClusteredSparseWeightedAverageForward(const T* weights, const T* values,
                                                  const int64_t* topk, const int64_t* groups,
                                                  T* out, int64_t batch_heads, int64_t length,
                                                  int64_t key_count, int64_t clusters, int64_t top,
                                                  int64_t dims, void* stream) {
  const int64_t rows = batch_heads * length;
  if (rows == 0 || dims == 0) return nullptr;
  const unsigned blocks = BlocksFor(rows);
  if (blocks == 0) return "too many query rows for one grid";
  WeightedAverageKernel<T><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      weights, values, topk, groups, out, rows, length, key_count, clusters, top, dims);
  return LaunchError();
}

template const char* ClusteredSparseDotProductForward<float>(const float*, const float*,
                                                             const int64_t*, const int64_t*, float*,
                                                             int64_t, int64_t, int64_t, int64_t,
                                                             int64_t, int64_t, void*);
template const char* ClusteredSparseDotProductForward<double>(const double*, const double*,
                                                              const int64_t*, const int64_t*,
                                                              double*, int64_t, int64_t, int64_t,
                                                              int64_t, int64_t, int64_t, void*);
template const char* ClusteredSparseWeightedAverageForward<float>(const float*, const float*,
                                                                  const int64_t*, const int64_t*,
                                                                  float*, int64_t, int64_t, int64_t,
                                                                  int64_t, int64_t, int64_t, void*);
template const char* ClusteredSparseWeightedAverageForward<double>(const double*, const double*,
                                                                   const int64_t*, const int64_t*,
                                                                   double*, int64_t, int64_t,
                                                                   int64_t, int64_t, int64_t,
                                                                   int64_t, void*);

}  // namespace performer::kernels::cuda
