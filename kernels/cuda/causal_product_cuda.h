// CUDA causal dot product (forward), raw pointers + shapes in:
//
//   out[b, l, m] = sum_{j <= l} (q[b, l, :] . k[b, j, :]) v[b, j, m]
//
// for b in [0, batch_heads) (N*H flattened), contiguous row-major
// (batch_heads, L, E) / (batch_heads, L, M) float32 device buffers. One block
// per (n, h); the E x M running state lives in shared memory, so E * M must
// not exceed kMaxCausalStateElements. Returns a CUDA error string or nullptr.
//
// Status: called by kernels/causal_product.cc for CUDA tensors; compiled by
// CI (nvcc) but not yet run on a GPU (docs/gpu.md).
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

constexpr int64_t kMaxCausalStateElements = 64 * 128;

const char* CausalDotProductForward(const float* queries, const float* keys, const float* values,
                                    float* out, int64_t batch_heads, int64_t length,
                                    int64_t query_dims, int64_t value_dims, void* stream);

}  // namespace performer::kernels::cuda
