#include <cuda_runtime.h>

#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/linear_attention_cuda.h"

namespace performer::kernels::cuda {
namespace {

constexpr int kTile = 16;

// Block (bx, by): head b = bx / feature_tiles, features f0 = (bx % feature_tiles)
// * 16 + [0, 16), columns c0 = by * 16 + [0, 16) of [v, 1]. Thread (tx, ty)
// accumulates kv[b, f0 + ty, c0 + tx] over all S keys, 16 keys per tile.
__global__ void KeyValueKernel(const float* __restrict__ phi_k, const float* __restrict__ values,
                               float* __restrict__ kv, int64_t key_length, int features,
                               int value_dims, int64_t feature_tiles) {
  __shared__ float k_tile[kTile][kTile + 1];  // [s][f]
  __shared__ float v_tile[kTile][kTile + 1];  // [s][c]
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t b = blockIdx.x / feature_tiles;
  const int f0 = static_cast<int>(blockIdx.x % feature_tiles) * kTile;
  const int c0 = static_cast<int>(blockIdx.y) * kTile;
  const int columns = value_dims + 1;
  const float* k = phi_k + b * key_length * features;
  const float* v = values + b * key_length * value_dims;
  float acc = 0.0f;
  for (int64_t s0 = 0; s0 < key_length; s0 += kTile) {
    const int64_t s = s0 + ty;  // the key this thread loads
    const int f = f0 + tx, c = c0 + tx;
    k_tile[ty][tx] = s < key_length && f < features ? k[s * features + f] : 0.0f;
    float value = 0.0f;
    if (s < key_length) {
      if (c < value_dims) {
        value = v[s * value_dims + c];
      } else if (c == value_dims) {
        value = 1.0f;
      }
    }
    v_tile[ty][tx] = value;
    __syncthreads();
    for (int i = 0; i < kTile; ++i) acc += k_tile[i][ty] * v_tile[i][tx];
    __syncthreads();
  }
  const int f = f0 + ty, c = c0 + tx;
  if (f < features && c < columns) kv[(b * features + f) * columns + c] = acc;
}

// Block (bx, by): head b = bx / row_tiles, query rows l0 = (bx % row_tiles) *
// 16 + [0, 16), value columns e0 = by * 16 + [0, 16). Thread (tx, ty)
// computes out[b, l0 + ty, e0 + tx]; thread (0, ty) also the denominator of
// row l0 + ty.
__global__ void ReadoutKernel(const float* __restrict__ phi_q, const float* __restrict__ kv,
                              float* __restrict__ out, int64_t query_length, int features,
                              int value_dims, int64_t row_tiles, float eps) {
  __shared__ float q_tile[kTile][kTile + 1];   // [l][f]
  __shared__ float kv_tile[kTile][kTile + 1];  // [f][e]
  __shared__ float k_sum[kTile];               // [f]
  __shared__ float reciprocal[kTile];          // [l]
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t b = blockIdx.x / row_tiles;
  const int64_t l0 = static_cast<int64_t>(blockIdx.x % row_tiles) * kTile;
  const int e0 = static_cast<int>(blockIdx.y) * kTile;
  const int columns = value_dims + 1;
  const float* q = phi_q + b * query_length * features;
  const float* head_kv = kv + b * static_cast<int64_t>(features) * columns;
  const int64_t l = l0 + ty;
  const int e = e0 + tx;
  float acc = 0.0f, denominator = 0.0f;
  for (int f0 = 0; f0 < features; f0 += kTile) {
    const int f_load = f0 + tx;  // q_tile: row ty, feature tx
    q_tile[ty][tx] = l < query_length && f_load < features ? q[l * features + f_load] : 0.0f;
    const int f_row = f0 + ty;  // kv_tile: feature ty, column tx
    kv_tile[ty][tx] = f_row < features && e < value_dims
                          ? head_kv[static_cast<int64_t>(f_row) * columns + e]
                          : 0.0f;
    if (ty == 0) {
      const int f = f0 + tx;
      k_sum[tx] = f < features ? head_kv[static_cast<int64_t>(f) * columns + value_dims] : 0.0f;
    }
    __syncthreads();
    for (int i = 0; i < kTile; ++i) acc += q_tile[ty][i] * kv_tile[i][tx];
    if (tx == 0) {
      for (int i = 0; i < kTile; ++i) denominator += q_tile[ty][i] * k_sum[i];
    }
    __syncthreads();
  }
  if (tx == 0) reciprocal[ty] = 1.0f / (denominator + eps);
  __syncthreads();
  if (l < query_length && e < value_dims) {
    out[(b * query_length + l) * value_dims + e] = acc * reciprocal[ty];
  }
}

}  // namespace

const char* LinearAttentionForwardCuda(const float* phi_q, const float* phi_k, const float* values,
                                       float* kv, float* out, int64_t batch_heads,
                                       int64_t query_length, int64_t key_length, int64_t features,
                                       int64_t value_dims, float eps, void* stream) {
  if (batch_heads < 0 || query_length < 0 || key_length < 0 || features < 1 || value_dims < 0) {
    return "bad shape";
  }
  if (batch_heads == 0 || query_length == 0 || value_dims == 0) return nullptr;
  if (features > 0x7fffffff || value_dims >= 0x7fffffff) return "M or E too large";
  const int64_t feature_tiles = (features + kTile - 1) / kTile;
  const int64_t column_tiles = (value_dims + 1 + kTile - 1) / kTile;
  const int64_t row_tiles = (query_length + kTile - 1) / kTile;
  const int64_t value_tiles = (value_dims + kTile - 1) / kTile;
  if (batch_heads * feature_tiles > 0x7fffffff || batch_heads * row_tiles > 0x7fffffff ||
      column_tiles > 65535) {
    return "too many blocks for one grid";
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 block(kTile, kTile);
  KeyValueKernel<<<dim3(static_cast<unsigned>(batch_heads * feature_tiles),
                        static_cast<unsigned>(column_tiles)),
                   block, 0, s>>>(phi_k, values, kv, key_length, static_cast<int>(features),
                                  static_cast<int>(value_dims), feature_tiles);
  if (const char* error = LaunchError()) return error;
  ReadoutKernel<<<dim3(static_cast<unsigned>(batch_heads * row_tiles),
                       static_cast<unsigned>(value_tiles)),
                  block, 0, s>>>(phi_q, kv, out, query_length, static_cast<int>(features),
                                 static_cast<int>(value_dims), row_tiles, eps);
  return LaunchError();
}

}  // namespace performer::kernels::cuda
