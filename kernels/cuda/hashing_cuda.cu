#include <cuda_runtime.h>

#include <climits>

#include "kernels/cuda/hashing_cuda.h"
#include "kernels/cuda/launch_status.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;
constexpr size_t kMaxSharedPlanes = 48 * 1024;

// Products and sums rounded one at a time, as the CPU loop does.
__device__ __forceinline__ float MulRn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double MulRn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float AddRn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double AddRn(double a, double b) { return __dadd_rn(a, b); }

template <typename T>
__global__ void __launch_bounds__(kThreads)
    ComputeHashesKernel(const T* __restrict__ x, const T* __restrict__ planes,
                        int64_t* __restrict__ codes, int64_t rows, int dims, int bits,
                        bool stage_planes) {
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const T* plane_base = planes;
  if (stage_planes) {
    T* staged = reinterpret_cast<T*>(smem_bytes);
    for (int i = static_cast<int>(threadIdx.x); i < bits * (dims + 1); i += kThreads) {
      staged[i] = planes[i];
    }
    __syncthreads();
    plane_base = staged;
  }
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;  // after the only __syncthreads; whole warps leave
  const T* xr = x + row * dims;
  uint64_t code = 0;
  for (int half = 0; half < 2; ++half) {
    const int b = half * 32 + lane;
    bool bit = false;
    if (b < bits) {
      const T* plane = plane_base + static_cast<int64_t>(b) * (dims + 1);
      T projection = 0;
      for (int e = 0; e < dims; ++e) projection = AddRn(projection, MulRn(xr[e], plane[e]));
      bit = projection > plane[dims];
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, bit);
    code |= static_cast<uint64_t>(ballot) << (32 * half);
  }
  if (lane == 0) codes[row] = static_cast<int64_t>(code);
}

}  // namespace

template <typename T>
const char* ComputeHashesForward(const T* x, const T* planes, int64_t* codes, int64_t rows,
                                 int64_t dims, int64_t bits, void* stream) {
  if (bits < 1 || bits > 63) return "bits must be in [1, 63]";
  if (dims >= INT_MAX / 64) return "E too large";
  if (rows == 0) return nullptr;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > INT_MAX) return "too many rows for one grid";
  const size_t plane_bytes = sizeof(T) * static_cast<size_t>(bits * (dims + 1));
  const bool stage = plane_bytes <= kMaxSharedPlanes;
  ComputeHashesKernel<T><<<static_cast<unsigned>(blocks), kThreads, stage ? plane_bytes : 0,
                           static_cast<cudaStream_t>(stream)>>>(
      x, planes, codes, rows, static_cast<int>(dims), static_cast<int>(bits), stage);
  return LaunchError();
}

template const char* ComputeHashesForward<float>(const float*, const float*, int64_t*, int64_t,
                                                 int64_t, int64_t, void*);
template const char* ComputeHashesForward<double>(const double*, const double*, int64_t*, int64_t,
                                                  int64_t, int64_t, void*);

}  // namespace performer::kernels::cuda
