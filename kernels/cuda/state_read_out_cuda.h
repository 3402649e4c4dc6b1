// CUDA kernel of kernels/state_read_out.h, raw pointers + shapes in (float32
// device buffers). For each row r and head h, with the state
// S = state + r * state_row_stride + h * M (E + 1) (M x (E + 1), contiguous;
// state_row_stride 0 lets every row read one state):
//
//   q      the query's features: with projection_t null, head_inputs[r, h]
//          (M; head_dim is M); otherwise formed from x = head_inputs[r, h]
//          (D) as FAVOR+ does:
//            u[f] = sum_i x[i] projection_t[i, f]            (i in order)
//            q[f] = exp(u[f] - diag_scale |x|^2 - max_f u) + kernel_eps
//   n[j] = sum_f q[f] S[f, j]                                 (f in order, j < E + 1)
//   out[j] = n[j] / n[E]                                      (j < E)
//
// One block of 128 threads per (row, head): the block stages its inputs,
// thread t forms features t, t + 128, ... and columns t, t + 128, ..., warp
// 0 the squares and the maximum by lanes; every sum's order depends on D, M
// and E alone, so a row's bits do not depend on the other rows of the
// launch. Shared memory: D + M + E + 1 floats plus two, at most
// kMaxStateReadOutSharedFloats. Returns a CUDA error string or nullptr.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

struct StateReadOutArgs {
  const float* state;  // row r, head h at state + r * state_row_stride + h * M (E + 1)
  int64_t state_row_stride;
  const float* head_inputs;                          // [rows, heads, D]
  const float* projection_t;                         // [D, M], or null: head_inputs are q
  float* out;                                        // [rows, heads, E]
  int64_t rows, heads, features, columns, head_dim;  // features M, columns E + 1, head_dim D
  float diag_scale;                                  // 1 / (2 sqrt(D))
  float kernel_eps;
};

constexpr int64_t kMaxStateReadOutSharedFloats = int64_t{12} * 1024;

const char* StateReadOutForward(const StateReadOutArgs& args, void* stream);

}  // namespace performer::kernels::cuda
