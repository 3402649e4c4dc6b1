// CUDA chunkwise prefill of causal linear attention (forward), raw pointers +
// shapes in (the op: kernels/causal_linear_prefill.h):
//
//   out[b, l, :]   = sum_{j <= l} (q[b, l] . k[b, j]) v[b, j] + q[b, l] S0[b]
//   final_state[b] = S0[b] + sum_j k[b, j] (x) v[b, j]
//
// for b in [0, batch_heads) (N*H flattened); q, k (batch_heads, L, M) and
// v (batch_heads, L, E) contiguous device buffers of `dtype`; initial_state
// (batch_heads, M, E) float32 or nullptr (= 0); out (batch_heads, L, E) and
// final_state (batch_heads, M, E) float32.
//
// Schedule: one block of 256 threads per (sequence b, tile of `et` value
// columns); it walks the chunks of its sequence in order, carrying the M x et
// float32 state slice in shared memory (sequential over chunks inside a
// block: no second pass, no state written per chunk; the parallelism is
// N*H*ceil(E/et) blocks, and et is narrowed, down to 32, while that is below
// the SM count). Per chunk of C tokens:
//   1. stage Qc, Kc (C x M) and Vc (C x et) in shared memory, zero padded to
//      multiples of 16 (rows past L, features past M, columns past E);
//   2. P = Qc Kc^T on the lower-triangular 16 x 16 tiles only, masked j <= i;
//   3. Oc = Qc S + P Vc, written to out (valid rows and columns only);
//   4. S += Kc^T Vc.
// bfloat16 / float16: C = 64, the products on tensor cores (nvcuda::wmma
// 16x16x16, float32 accumulation); P and a copy of S are rounded to the
// input dtype as tensor-core operands, S itself stays float32. float32: C = 32,
// plain float32 FMAs (SIMT), no rounding beyond float32.
// Shared memory grows with M (about 2 C M elements for Qc, Kc plus 4-6 bytes
// per state element): M up to about 512 fits on an H100 (227 KB per block);
// larger M returns an error. Returns a CUDA error string or nullptr.
//
// Status: called by kernels/causal_linear_prefill.cc for CUDA tensors;
// compiled by CI (nvcc) but not yet run on a GPU (docs/gpu.md).
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

enum class PrefillDtype { kFloat32, kBFloat16, kFloat16 };

const char* CausalLinearPrefillForward(PrefillDtype dtype, const void* q, const void* k,
                                       const void* v, const float* initial_state, float* out,
                                       float* final_state, int64_t batch_heads, int64_t length,
                                       int64_t feature_dims, int64_t value_dims, void* stream);

}  // namespace performer::kernels::cuda
