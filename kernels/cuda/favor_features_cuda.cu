#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cmath>

#include "kernels/cuda/favor_features_cuda.h"
#include "kernels/cuda/float_conversion.cuh"
#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kTile = 16;
constexpr int kReduceThreads = 256;
constexpr int kElementwiseThreads = 256;
constexpr int64_t kMaxElementwiseBlocks = 65536;

// u[row, f] = c * sum_d x[row, d] P[f, d]: thread (tx, ty) of block (bx, by)
// computes row bx * 16 + ty, feature by * 16 + tx; tiles of 16 dims of x and
// P are staged in shared memory (both loads coalesced along d). Blocks of
// the first feature tile also sum |x|^2 of their rows for diag.
template <typename T>
__global__ void ProjectKernel(const T* __restrict__ x, const T* __restrict__ projection,
                              float* __restrict__ u, float* __restrict__ diag, int64_t rows,
                              int dims, int features, float normalizer) {
  __shared__ float x_tile[kTile][kTile + 1];
  __shared__ float p_tile[kTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kTile + ty;
  const int feature_of_load = static_cast<int>(blockIdx.y) * kTile + ty;
  const int feature = static_cast<int>(blockIdx.y) * kTile + tx;
  const bool with_diag = diag != nullptr && blockIdx.y == 0 && tx == 0;
  float acc = 0.0f, squares = 0.0f;
  for (int d0 = 0; d0 < dims; d0 += kTile) {
    const int d = d0 + tx;
    x_tile[ty][tx] = row < rows && d < dims ? ToFloat(x[row * dims + d]) : 0.0f;
    p_tile[ty][tx] = feature_of_load < features && d < dims
                         ? ToFloat(projection[static_cast<int64_t>(feature_of_load) * dims + d])
                         : 0.0f;
    __syncthreads();
    for (int i = 0; i < kTile; ++i) acc += x_tile[ty][i] * p_tile[tx][i];
    if (with_diag) {
      for (int i = 0; i < kTile; ++i) squares += x_tile[ty][i] * x_tile[ty][i];
    }
    __syncthreads();
  }
  if (row < rows && feature < features) u[row * features + feature] = normalizer * acc;
  if (with_diag && row < rows) diag[row] = squares / 2.0f * (normalizer * normalizer);
}

// stabiliser[b] = max of u over span b (span elements, contiguous).
__global__ void SpanMaxKernel(const float* __restrict__ u, float* __restrict__ stabiliser,
                              int64_t span) {
  __shared__ float warp_max[kReduceThreads / 32];
  const float* values = u + static_cast<int64_t>(blockIdx.x) * span;
  float m = -CUDART_INF_F;
  for (int64_t i = threadIdx.x; i < span; i += blockDim.x) m = fmaxf(m, values[i]);
  m = WarpMax(m);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = warp_max[0];
    for (unsigned w = 1; w < blockDim.x / 32; ++w) total = fmaxf(total, warp_max[w]);
    stabiliser[blockIdx.x] = total;
  }
}

// out[i] from u[i] (see the header). u and out may alias (same element read
// then written by one thread), so neither is __restrict__.
template <typename T>
__global__ void FeatureOutKernel(const float* u, const float* __restrict__ diag,
                                 const float* __restrict__ stabiliser, T* out, int64_t total,
                                 int64_t features, int64_t rows_per_span, FavorMapKind map,
                                 float ratio, float eps) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const float value = u[i];
    float phi;
    if (map == FavorMapKind::kGeneralizedRelu) {
      phi = fmaxf(value, 0.0f) + eps;
    } else {
      const int64_t row = i / features;
      phi = ratio * (expf(value - diag[row] - stabiliser[row / rows_per_span]) + eps);
    }
    out[i] = FromFloat<T>(phi);
  }
}

template <typename T>
const char* Run(const FavorFeaturesArgs& a, cudaStream_t stream) {
  const int64_t rows = a.groups * a.length;
  const bool softmax = a.map != FavorMapKind::kGeneralizedRelu;
  const float normalizer = static_cast<float>(std::pow(static_cast<double>(a.dims), -0.25));
  const float ratio = static_cast<float>(1.0 / std::sqrt(static_cast<double>(a.features)));
  const dim3 tile_block(kTile, kTile);
  const dim3 tile_grid(static_cast<unsigned>((rows + kTile - 1) / kTile),
                       static_cast<unsigned>((a.features + kTile - 1) / kTile));
  ProjectKernel<T><<<tile_grid, tile_block, 0, stream>>>(
      static_cast<const T*>(a.data), static_cast<const T*>(a.projection), a.u,
      softmax ? a.diag : nullptr, rows, static_cast<int>(a.dims), static_cast<int>(a.features),
      normalizer);
  if (const char* error = LaunchError()) return error;
  int64_t rows_per_span = 1;
  if (softmax) {
    rows_per_span = a.map == FavorMapKind::kSoftmaxKey ? a.length : 1;
    const int64_t spans = rows / rows_per_span;
    SpanMaxKernel<<<static_cast<unsigned>(spans), kReduceThreads, 0, stream>>>(
        a.u, a.stabiliser, rows_per_span * a.features);
    if (const char* error = LaunchError()) return error;
  }
  const int64_t total = rows * a.features;
  int64_t blocks = (total + kElementwiseThreads - 1) / kElementwiseThreads;
  if (blocks > kMaxElementwiseBlocks) blocks = kMaxElementwiseBlocks;
  FeatureOutKernel<T><<<static_cast<unsigned>(blocks), kElementwiseThreads, 0, stream>>>(
      a.u, a.diag, a.stabiliser, static_cast<T*>(a.out), total, a.features, rows_per_span, a.map,
      ratio, a.eps);
  return LaunchError();
}

}  // namespace

const char* FavorFeaturesForward(const FavorFeaturesArgs& args, void* stream) {
  if (args.groups < 0 || args.length < 0 || args.dims < 1 || args.features < 1) {
    return "bad shape: need dims >= 1 and features >= 1";
  }
  const int64_t rows = args.groups * args.length;
  if (rows == 0) return nullptr;
  if (args.dims > 0x7fffffff || args.features > 0x7fffffff) return "dims or features too large";
  if ((rows + kTile - 1) / kTile > 0x7fffffff || (args.features + kTile - 1) / kTile > 65535) {
    return "too many rows or features for one grid";
  }
  if (args.map == FavorMapKind::kSoftmaxKey && args.groups > 0x7fffffff) return "too many groups";
  if (args.map == FavorMapKind::kSoftmaxQuery && rows > 0x7fffffff) return "too many rows";
  if (args.map != FavorMapKind::kGeneralizedRelu &&
      (args.diag == nullptr || args.stabiliser == nullptr)) {
    return "softmax maps need the diag and stabiliser workspaces";
  }
  if (args.dtype != FavorDtype::kFloat32 && static_cast<const void*>(args.u) == args.out) {
    return "out may alias u only for float32";
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (args.dtype) {
    case FavorDtype::kFloat32:
      return Run<float>(args, s);
    case FavorDtype::kFloat16:
      return Run<__half>(args, s);
    case FavorDtype::kBFloat16:
      return Run<__nv_bfloat16>(args, s);
  }
  return "unknown dtype";
}

}  // namespace performer::kernels::cuda
