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
// Schedule: blocks of 256 threads, one per (sequence b, segment, tile of et
// value columns); a block walks the chunks of its segment in order,
// carrying the M x et float32 state slice in shared memory. A sequence is
// one segment when the sequences' column tiles alone fill the SMs; else it
// is split into segments of at least 2 chunks, as many as fit in one wave
// of resident blocks (kernels/cuda/causal_linear_prefill_plan.h), in two
// passes: (a) each segment's sum of k (x) v from zero, into the workspace;
// a prefix scan over segments turns those into each segment's starting
// state (and gives the final state); (b) each segment's outputs from its
// starting state. Short sequences also narrow et, down to 32, while that
// adds blocks within the wave. Per chunk of C tokens:
//   1. stage Qc, Kc (C x M) and Vc (C x et) in shared memory, zero padded to
//      multiples of 16 (rows past L, features past M, columns past E);
//      16-byte loads for 16-bit inputs with M a multiple of 16;
//   2. P = Qc Kc^T on the lower-triangular 16 x 16 tiles only, masked j <= i;
//   3. Oc = Qc S + P Vc, written to out (valid rows and columns only);
//   4. S += Kc^T Vc (pass (a) does only this step).
// bfloat16 / float16: C = 64, the products on tensor cores (nvcuda::wmma
// 16x16x16, float32 accumulation); P and a copy of S are rounded to the
// input dtype as tensor-core operands, S itself stays float32. float32: C = 32,
// plain float32 FMAs (SIMT), no rounding beyond float32.
// Shared memory grows with M (about 2 C M elements for Qc, Kc plus 4-6 bytes
// per state element): M up to about 512 fits in sm_90's 227 KB per block;
// larger M returns an error. Returns a CUDA error string or nullptr.
//
// The workspace holds (batch_heads, segments, M, E) float32 states: at least
// CausalLinearPrefillWorkspaceFloats(...) floats (0 when the prefill runs in
// one pass, where it may be nullptr).
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

enum class PrefillDtype { kFloat32, kBFloat16, kFloat16 };

int64_t CausalLinearPrefillWorkspaceFloats(PrefillDtype dtype, int64_t batch_heads, int64_t length,
                                           int64_t feature_dims, int64_t value_dims);

const char* CausalLinearPrefillForward(PrefillDtype dtype, const void* q, const void* k,
                                       const void* v, const float* initial_state, float* out,
                                       float* final_state, float* workspace,
                                       int64_t workspace_floats, int64_t batch_heads,
                                       int64_t length, int64_t feature_dims, int64_t value_dims,
                                       void* stream);

}  // namespace performer::kernels::cuda
