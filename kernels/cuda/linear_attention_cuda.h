// CUDA non-causal linear attention (kernels/linear_attention.h), raw
// pointers + shapes in, contiguous row-major float32 device buffers, for
// b in [0, batch_heads) (N*H flattened):
//
//   phase 1: kv[b] = phi_k[b]^T [v[b], 1]     (M, E + 1): the last column is
//            sum_s phi_k[b, s] (the normaliser's key sum)
//   phase 2: out[b, l, e] = (phi_q[b, l] . kv[b, :, e]) * z,
//            z = 1 / (phi_q[b, l] . kv[b, :, E] + eps)
//
// Both phases are 16 x 16 tiled shared-memory products, one output element
// per thread: phase 1 grid (batch_heads * ceil(M / 16), ceil((E + 1) / 16)),
// looping over S; phase 2 grid (batch_heads * ceil(L / 16), ceil(E / 16)),
// looping over M, each block also reducing the denominators of its 16 rows.
// kv is a caller-provided workspace of batch_heads * M * (E + 1) floats.
// Returns a CUDA error string or nullptr.
//
// Called by kernels/linear_attention.cc for CUDA tensors.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

const char* LinearAttentionForwardCuda(const float* phi_q, const float* phi_k, const float* values,
                                       float* kv, float* out, int64_t batch_heads,
                                       int64_t query_length, int64_t key_length, int64_t features,
                                       int64_t value_dims, float eps, void* stream);

}  // namespace performer::kernels::cuda
