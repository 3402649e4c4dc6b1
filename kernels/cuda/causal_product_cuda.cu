#include <cuda_runtime.h>

#include "kernels/cuda/causal_product_cuda.h"

namespace performer::kernels::cuda {
namespace {

// Thread m of block b owns column m of the running state S (E x M); the
// current key and query rows are staged in shared memory once per step.
__global__ void CausalDotProductForwardKernel(const float* __restrict__ queries,
                                              const float* __restrict__ keys,
                                              const float* __restrict__ values,
                                              float* __restrict__ out, int64_t length, int e_dims,
                                              int m_dims) {
  extern __shared__ float shared[];
  float* state = shared;                     // e_dims * m_dims
  float* key_row = state + e_dims * m_dims;  // e_dims
  float* query_row = key_row + e_dims;       // e_dims
  const int64_t b = blockIdx.x;
  const int m = threadIdx.x;
  const float* q = queries + b * length * e_dims;
  const float* k = keys + b * length * e_dims;
  const float* v = values + b * length * m_dims;
  float* o = out + b * length * m_dims;
  for (int i = m; i < e_dims * m_dims; i += blockDim.x) state[i] = 0.f;
  __syncthreads();
  for (int64_t l = 0; l < length; ++l) {
    for (int e = m; e < e_dims; e += blockDim.x) {
      key_row[e] = k[l * e_dims + e];
      query_row[e] = q[l * e_dims + e];
    }
    __syncthreads();
    if (m < m_dims) {
      const float value = v[l * m_dims + m];
      float acc = 0.f;
      for (int e = 0; e < e_dims; ++e) {
        const float s = state[e * m_dims + m] + key_row[e] * value;
        state[e * m_dims + m] = s;
        acc += query_row[e] * s;
      }
      o[l * m_dims + m] = acc;
    }
    __syncthreads();
  }
}

}  // namespace

const char* CausalDotProductForward(const float* queries, const float* keys, const float* values,
                                    float* out, int64_t batch_heads, int64_t length,
                                    int64_t query_dims, int64_t value_dims, void* stream) {
  if (query_dims * value_dims > kMaxCausalStateElements) return "E * M too large for shared memory";
  if (value_dims > 1024) return "M must be at most 1024 (one thread per value column)";
  if (batch_heads == 0 || length == 0) return nullptr;
  const int threads = static_cast<int>(value_dims < 32 ? 32 : value_dims);
  const size_t shared_bytes = sizeof(float) * (query_dims * value_dims + 2 * query_dims);
  CausalDotProductForwardKernel<<<static_cast<unsigned>(batch_heads), threads, shared_bytes,
                                  static_cast<cudaStream_t>(stream)>>>(
      queries, keys, values, out, length, static_cast<int>(query_dims),
      static_cast<int>(value_dims));
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace performer::kernels::cuda
