// CUDA kernel of kernels/causal_softmax_attention.h, raw pointers + shapes
// in (float32 device buffers; last int64). For row r, token i and head h,
// with count = last[r, i] + 1 keys:
//
//   s_j = (q . key_j) * temp        (the dot in order over E)
//   out = sum_j softmax(s)_j value_j
//
// One warp per (row, token, head), four per block of 128 threads. The keys
// go 32 at a time in order (lane l scores key j0 + l), an online softmax
// folding each chunk into a running maximum, sum and output (lanes own
// output elements l, l + 32, ...; each chunk's weights in key order), so
// every operation's order depends on count, E and D alone: a token's bits do
// not depend on the other tokens and rows of the launch. Shared memory per
// warp: the query (E) and the output (D), at most
// kMaxCausalSoftmaxAttentionSharedFloats for the block. Returns a CUDA error
// string or nullptr.
#pragma once

#include <cstdint>

namespace performer::kernels::cuda {

struct CausalSoftmaxAttentionArgs {
  const float* queries;  // [rows, tokens, heads, E]
  const float* keys;  // row r, position j, head h at keys + r * key_row + j * key_position + h * E
  const float* values;  // likewise with value_row, value_position and D
  const int64_t* last;  // [rows, tokens]
  float* out;           // [rows, tokens, heads, D]
  int64_t key_row, key_position, value_row, value_position;
  int64_t rows, tokens, heads, e, d;
  float temp;
};

constexpr int64_t kMaxCausalSoftmaxAttentionSharedFloats = int64_t{12} * 1024;

const char* CausalSoftmaxAttentionForward(const CausalSoftmaxAttentionArgs& args, void* stream);

}  // namespace performer::kernels::cuda
