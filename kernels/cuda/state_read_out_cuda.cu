#include <cuda_runtime.h>
#include <math_constants.h>

#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/state_read_out_cuda.h"
#include "kernels/cuda/warp_reduce.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreads = 128;

// The FAVOR+ query features of x_s (D, in shared memory) into q_s (M).
__device__ void FormFavorFeatures(const StateReadOutArgs& a, const float* x_s, float* q_s,
                                  float* shift_s, int tid) {
  const int64_t d = a.head_dim, m = a.features;
  for (int64_t f = tid; f < m; f += kThreads) {
    const float* p = a.projection_t + f;
    float u = 0.0f;
    for (int64_t i = 0; i < d; ++i) u = __fmaf_rn(x_s[i], __ldg(p + i * m), u);
    q_s[f] = u;
  }
  __syncthreads();
  if (tid < 32) {
    float squares = 0.0f, top = -CUDART_INF_F;
    for (int64_t i = tid; i < d; i += 32) squares = __fmaf_rn(x_s[i], x_s[i], squares);
    for (int64_t f = tid; f < m; f += 32) top = fmaxf(top, q_s[f]);
    squares = WarpSum(squares);
    top = WarpMax(top);
    if (tid == 0) *shift_s = __fadd_rn(__fmul_rn(squares, a.diag_scale), top);
  }
  __syncthreads();
  const float shift = *shift_s;
  for (int64_t f = tid; f < m; f += kThreads) {
    q_s[f] = __fadd_rn(expf(__fsub_rn(q_s[f], shift)), a.kernel_eps);
  }
}

// Block b reads out head b % heads of row b / heads (see the header).
// Shared memory: x (D) | q (M) | n (E + 1) | the shift.
__global__ void __launch_bounds__(kThreads) StateReadOutKernel(StateReadOutArgs a) {
  extern __shared__ float shared[];
  const int64_t d = a.head_dim, m = a.features, c = a.columns, e = c - 1;
  const int64_t row = static_cast<int64_t>(blockIdx.x) / a.heads;
  const int64_t head = static_cast<int64_t>(blockIdx.x) % a.heads;
  float* x_s = shared;
  float* q_s = x_s + d;
  float* n_s = q_s + m;
  float* shift_s = n_s + c;
  const int tid = static_cast<int>(threadIdx.x);
  const float* x = a.head_inputs + (row * a.heads + head) * d;
  if (a.projection_t == nullptr) {
    for (int64_t f = tid; f < m; f += kThreads) q_s[f] = x[f];
  } else {
    for (int64_t i = tid; i < d; i += kThreads) x_s[i] = x[i];
    __syncthreads();
    FormFavorFeatures(a, x_s, q_s, shift_s, tid);
  }
  __syncthreads();
  const float* s = a.state + row * a.state_row_stride + head * m * c;
  for (int64_t j = tid; j < c; j += kThreads) {
    float n = 0.0f;
    for (int64_t f = 0; f < m; ++f) n = __fmaf_rn(q_s[f], s[f * c + j], n);
    n_s[j] = n;
  }
  __syncthreads();
  float* out = a.out + (row * a.heads + head) * e;
  for (int64_t j = tid; j < e; j += kThreads) out[j] = __fdiv_rn(n_s[j], n_s[e]);
}

}  // namespace

const char* StateReadOutForward(const StateReadOutArgs& args, void* stream) {
  if (args.head_dim < 1 || args.features < 1 || args.columns < 2 || args.heads < 1 ||
      args.rows < 0) {
    return "the read-out needs D, M, E and heads >= 1";
  }
  if (args.projection_t == nullptr && args.head_dim != args.features) {
    return "query features need head_dim == features";
  }
  const int64_t floats = args.head_dim + args.features + args.columns + 1;
  if (floats > kMaxStateReadOutSharedFloats) {
    return "D + M + E + 1 too large for the read-out kernel's shared memory";
  }
  const int64_t blocks = args.rows * args.heads;
  if (blocks == 0) return nullptr;
  if (blocks > 0x7fffffff) return "too many (row, head) pairs for one grid";
  StateReadOutKernel<<<static_cast<unsigned>(blocks), kThreads,
                       sizeof(float) * static_cast<size_t>(floats),
                       static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchError();
}

}  // namespace performer::kernels::cuda
