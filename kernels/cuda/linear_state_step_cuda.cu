#include <cuda_runtime.h>
#include <math_constants.h>

#include "kernels/cuda/linear_state_step_cuda.h"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kScalars = 8;

// Scalars of one row shared by the block (indices into the scalar slots).
constexpr int kDecay = 0;
constexpr int kQueryShift = 1;
constexpr int kKeyShift = 2;
constexpr int kQuerySum = 3;
constexpr int kDenominator = 4;

__device__ float WarpMax(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

__device__ float WarpSum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Block r steps row r (see the header); blocks are one-dimensional.
// Shared memory, in floats: q (M) | k (M) | acc (E + 1) | partial
// (blockDim.x) | scalars.
// 56 registers: four blocks per SM (50% occupancy). Forcing six (40
// registers, a few spilled) measured slower on the H100 (docs/gpu.md).
__global__ void LinearStateStepKernel(LinearStateStepArgs a) {
  extern __shared__ float shared[];
  const int m = static_cast<int>(a.features);
  const int c = static_cast<int>(a.columns);
  const int e = c - 1;
  float* q_s = shared;
  float* k_s = q_s + m;
  float* acc_s = k_s + m;
  float* partial = acc_s + c;
  float* scalars = partial + blockDim.x;
  const int64_t r = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int64_t slot = a.slots != nullptr ? a.slots[r] : r;
  const int out_columns = a.normalize ? e : c;
  if (slot < 0 || slot >= a.pool) {
    // Block-uniform exit, before any barrier.
    for (int j = tid; j < out_columns; j += threads) a.out[r * out_columns + j] = CUDART_NAN_F;
    return;
  }
  float* state = a.state + slot * static_cast<int64_t>(m) * c;
  const float* v = a.v + r * e;

  // 1. The q and k features of the row, staged in shared memory.
  if (a.projections != nullptr) {
    const int64_t b = r / a.heads, h = r % a.heads;
    const int64_t query_index = (b * 2) * a.heads + h;
    const int64_t key_index = (b * 2 + 1) * a.heads + h;
    const float* uq = a.projections + query_index * m;
    const float* uk = a.projections + key_index * m;
    for (int f = tid; f < m; f += threads) {
      q_s[f] = uq[f];
      k_s[f] = uk[f];
    }
    __syncthreads();
    if (tid < 32) {
      float q_max = -CUDART_INF_F, k_max = -CUDART_INF_F;
      for (int f = tid; f < m; f += 32) {
        q_max = fmaxf(q_max, q_s[f]);
        k_max = fmaxf(k_max, k_s[f]);
      }
      q_max = WarpMax(q_max);
      k_max = WarpMax(k_max);
      if (tid == 0) {
        const float old_max = a.key_max[slot];
        const float new_max = fmaxf(old_max, k_max);
        a.key_max[slot] = new_max;
        scalars[kDecay] = expf(old_max - new_max);
        scalars[kQueryShift] = a.diag[query_index] + q_max;
        scalars[kKeyShift] = a.diag[key_index] + new_max;
      }
    }
    __syncthreads();
    const float query_shift = scalars[kQueryShift], key_shift = scalars[kKeyShift];
    for (int f = tid; f < m; f += threads) {
      q_s[f] = expf(q_s[f] - query_shift) + a.kernel_eps;
      k_s[f] = expf(k_s[f] - key_shift);
    }
  } else {
    for (int f = tid; f < m; f += threads) {
      q_s[f] = a.q[r * m + f];
      k_s[f] = a.k[r * m + f];
    }
    if (tid == 0) scalars[kDecay] = a.decay != nullptr ? a.decay[r] : 1.0f;
  }
  __syncthreads();
  if (a.normalize && tid < 32) {
    float q_sum = 0.0f;
    for (int f = tid; f < m; f += 32) q_sum += q_s[f];
    q_sum = WarpSum(q_sum);
    if (tid == 0) scalars[kQuerySum] = q_sum;
  }

  // 2. Update and read-out. With C <= threads, thread t owns column
  // t % C of features t / C, t / C + G, ... (G = threads / C groups): the
  // block walks the row's M x C state as one contiguous array, so every
  // load and store is coalesced and no lane idles on a partial warp of
  // columns. Wider states take the columns threads at a time (G = 1). Each
  // state element is read and written once; loads are batched kUnroll deep
  // so that each thread keeps several in flight.
  const float decay = scalars[kDecay];
  const bool grouped = c <= threads;
  const int groups = grouped ? threads / c : 1;
  const int64_t stride = static_cast<int64_t>(groups) * c;
  for (int j0 = 0; j0 < c; j0 += grouped ? c : threads) {
    const int j = grouped ? tid % c : j0 + tid;
    const int f0 = grouped ? tid / c : 0;
    const bool active = grouped ? tid < groups * c : j < c;
    float acc = 0.0f;
    if (active) {
      const float vj = j < e ? v[j] : 1.0f;
      float* s = state + static_cast<int64_t>(f0) * c + j;
      int f = f0;
      constexpr int kUnroll = 8;
      for (; f + (kUnroll - 1) * groups < m; f += kUnroll * groups, s += kUnroll * stride) {
        float x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) x[u] = s[u * stride];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int fu = f + u * groups;
          x[u] = x[u] * decay + k_s[fu] * vj;
          s[u * stride] = x[u];
          acc += q_s[fu] * x[u];
        }
      }
      for (; f < m; f += groups, s += stride) {
        const float updated = *s * decay + k_s[f] * vj;
        *s = updated;
        acc += q_s[f] * updated;
      }
    }
    partial[tid] = acc;
    __syncthreads();
    if (grouped) {
      for (int jj = tid; jj < c; jj += threads) {
        float total = 0.0f;
        for (int g = 0; g < groups; ++g) total += partial[g * c + jj];
        acc_s[jj] = total;
      }
    } else if (j < c) {
      acc_s[j] = acc;
    }
    __syncthreads();
  }

  // 3. Output.
  if (!a.normalize) {
    for (int j = tid; j < c; j += threads) a.out[r * c + j] = acc_s[j];
    return;
  }
  float* sums = a.sums != nullptr ? a.sums + slot * c : nullptr;
  const float q_sum = scalars[kQuerySum];
  if (tid == 0) {
    // Read sums[E] before any thread updates it (barrier below).
    float n = a.scale * acc_s[e];
    if (sums != nullptr) n += a.offset * q_sum * (sums[e] + 1.0f);
    scalars[kDenominator] = n + a.eps * q_sum;
  }
  __syncthreads();
  const float denominator = scalars[kDenominator];
  for (int j = tid; j < c; j += threads) {
    float n = a.scale * acc_s[j];
    if (sums != nullptr) {
      const float s = sums[j] + (j < e ? v[j] : 1.0f);
      sums[j] = s;
      n += a.offset * q_sum * s;
    }
    if (j < e) a.out[r * e + j] = n / denominator;
  }
}

}  // namespace

const char* LinearStateStepForward(const LinearStateStepArgs& args, void* stream) {
  if (args.features < 1 || args.columns < 1) return "M and E + 1 must be positive";
  if (args.slots == nullptr && args.pool < args.rows) return "fewer states than rows";
  if (args.projections != nullptr &&
      (args.heads < 1 || args.diag == nullptr || args.key_max == nullptr || !args.normalize)) {
    return "FAVOR+ step needs heads >= 1, diag, key_max and normalisation";
  }
  if (args.projections == nullptr && (args.q == nullptr || args.k == nullptr)) {
    return "q and k are required without projections";
  }
  if (args.rows > 0x7fffffff) return "too many rows for one grid";
  if (args.rows == 0) return nullptr;
  const int64_t shared_floats = 2 * args.features + args.columns + kThreadsPerBlock + kScalars;
  if (shared_floats > kMaxStateStepSharedFloats) return "2 M + E too large for shared memory";
  LinearStateStepKernel<<<static_cast<unsigned>(args.rows), kThreadsPerBlock,
                          sizeof(float) * static_cast<size_t>(shared_floats),
                          static_cast<cudaStream_t>(stream)>>>(args);
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace performer::kernels::cuda
