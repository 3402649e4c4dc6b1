#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/linear_state_step_cuda.h"
#include "kernels/cuda/warp_reduce.cuh"

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
constexpr int kNewKeyMax = 5;
constexpr int kLastBlock = 6;

// One row's inputs and output at one token. The step kernels and the scan
// kernel locate them differently; everything they compute from them is the
// same code, so the bits depend only on the values.
struct RowView {
  const float* q;       // (M) without FAVOR+ features
  const float* k;       // (M) without FAVOR+ features
  const float* decay;   // one float, or null (= 1)
  const float* u_q;     // FAVOR+ projections (M), with projections
  const float* u_k;     // (M)
  const float* diag_q;  // one float each, with projections
  const float* diag_k;
  const float* x_q;  // head inputs (D), with head_inputs
  const float* x_k;
  const float* v;  // (E)
  float* out;      // (E + 1), or (E) when normalising
};

// Row r = b * heads + h of sequence b's token t in a layout of `tokens`
// tokens: plain inputs [B, T, H, *] at row (b T + t) H + h, FAVOR+ inputs
// [B, T, 2, H, *] at query (b T + t) 2 H + h and key + H. A step is the
// layout of one token (T = 1, t = 0), whose plain rows are r itself.
__device__ RowView RowAt(const LinearStateStepArgs& a, int64_t r, int64_t heads, int64_t tokens,
                         int64_t t) {
  const int64_t m = a.features, e = a.columns - 1;
  const int64_t b = r / heads, h = r % heads;
  const int64_t row = (b * tokens + t) * heads + h;
  const int64_t query = (b * tokens + t) * 2 * heads + h, key = query + heads;
  RowView view{};
  view.q = a.q != nullptr ? a.q + row * m : nullptr;
  view.k = a.k != nullptr ? a.k + row * m : nullptr;
  view.decay = a.decay != nullptr ? a.decay + row : nullptr;
  if (a.projections != nullptr) {
    view.u_q = a.projections + query * m;
    view.u_k = a.projections + key * m;
    view.diag_q = a.diag + query;
    view.diag_k = a.diag + key;
  }
  if (a.head_inputs != nullptr) {
    view.x_q = a.head_inputs + query * a.head_dim;
    view.x_k = a.head_inputs + key * a.head_dim;
  }
  view.v = a.v + row * e;
  view.out = a.out + row * (a.normalize ? e : e + 1);
  return view;
}

// Row r of a step call (FAVOR+ inputs [B, 2, H, *], the rest [R, *]).
__device__ RowView StepRow(const LinearStateStepArgs& a, int64_t r) {
  return RowAt(a, r, FavorFeaturesInStep(a) ? a.heads : 1, 1, 0);
}

// u = x . projection_t of the row's query and key (x staged in x_s, 2 D
// floats) into q_s and k_s; thread t forms features t, t + T, ...: the loads
// of projection_t are coalesced across the block and every row of the batch
// reads the same D x M floats (from L2). Each u[f] sums over i in order.
// Also returns |x_q|^2 and |x_k|^2 to lane 0 of warp 0. Ends with a barrier.
__device__ void ProjectHeadInputs(const LinearStateStepArgs& a, const RowView& row, float* q_s,
                                  float* k_s, float* x_s, float* query_squares,
                                  float* key_squares) {
  const int m = static_cast<int>(a.features);
  const int d = static_cast<int>(a.head_dim);
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const float* xq = row.x_q;
  const float* xk = row.x_k;
  for (int i = tid; i < 2 * d; i += threads) x_s[i] = i < d ? xq[i] : xk[i - d];
  __syncthreads();
  for (int f = tid; f < m; f += threads) {
    const float* p = a.projection_t + f;
    float uq = 0.0f, uk = 0.0f;
    for (int i = 0; i < d; ++i) {
      const float w = __ldg(p + static_cast<int64_t>(i) * m);
      uq = fmaf(x_s[i], w, uq);
      uk = fmaf(x_s[d + i], w, uk);
    }
    q_s[f] = uq;
    k_s[f] = uk;
  }
  if (tid < 32) {
    float sq = 0.0f, sk = 0.0f;
    for (int i = tid; i < d; i += 32) {
      sq = fmaf(x_s[i], x_s[i], sq);
      sk = fmaf(x_s[d + i], x_s[d + i], sk);
    }
    sq = WarpSum(sq);
    sk = WarpSum(sk);
    *query_squares = sq;
    *key_squares = sk;
  }
  __syncthreads();
}

// Stages the q and k features of row r in shared memory (q_s, k_s: M each;
// x_s: 2 D scratch floats, used with head_inputs) and sets scalars[kDecay]
// (and, for FAVOR+, scalars[kNewKeyMax]; the caller writes it back to
// key_max once no block of the row still reads the old value) and
// scalars[kQuerySum] when normalising. Ends with a barrier.
__device__ void StageFeatures(const LinearStateStepArgs& a, const RowView& row, int64_t slot,
                              float* q_s, float* k_s, float* x_s, float* scalars) {
  const int m = static_cast<int>(a.features);
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  if (FavorFeaturesInStep(a)) {
    float query_squares = 0.0f, key_squares = 0.0f;  // lane 0 of warp 0
    if (a.head_inputs != nullptr) {
      ProjectHeadInputs(a, row, q_s, k_s, x_s, &query_squares, &key_squares);
    } else {
      const float* uq = row.u_q;
      const float* uk = row.u_k;
      for (int f = tid; f < m; f += threads) {
        q_s[f] = uq[f];
        k_s[f] = uk[f];
      }
      __syncthreads();
    }
    if (tid < 32) {
      float q_max = -CUDART_INF_F, k_max = -CUDART_INF_F;
      for (int f = tid; f < m; f += 32) {
        q_max = fmaxf(q_max, q_s[f]);
        k_max = fmaxf(k_max, k_s[f]);
      }
      q_max = WarpMax(q_max);
      k_max = WarpMax(k_max);
      if (tid == 0) {
        const bool projected = a.head_inputs != nullptr;
        const float query_diag = projected ? __fmul_rn(query_squares, a.diag_scale) : *row.diag_q;
        const float key_diag = projected ? __fmul_rn(key_squares, a.diag_scale) : *row.diag_k;
        const float old_max = a.key_max[slot];
        const float new_max = fmaxf(old_max, k_max);
        scalars[kNewKeyMax] = new_max;
        scalars[kDecay] = expf(old_max - new_max);
        scalars[kQueryShift] = query_diag + q_max;
        scalars[kKeyShift] = key_diag + new_max;
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
      q_s[f] = row.q[f];
      k_s[f] = row.k[f];
    }
    if (tid == 0) scalars[kDecay] = row.decay != nullptr ? *row.decay : 1.0f;
  }
  __syncthreads();
  if (a.normalize && tid < 32) {
    float q_sum = 0.0f;
    for (int f = tid; f < m; f += 32) q_sum += q_s[f];
    q_sum = WarpSum(q_sum);
    if (tid == 0) scalars[kQuerySum] = q_sum;
  }
  __syncthreads();
}

// Writes the row's output from its column sums acc_s = q . S (E + 1), with
// the normalisation and the running sums when a.normalize. Products and
// sums are spelled out (_rn intrinsics are never contracted), so every
// kernel that inlines this rounds alike.
__device__ void WriteOutput(const LinearStateStepArgs& a, const RowView& row, int64_t slot,
                            const float* acc_s, float* scalars) {
  const int c = static_cast<int>(a.columns);
  const int e = c - 1;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const float* v = row.v;
  if (!a.normalize) {
    for (int j = tid; j < c; j += threads) row.out[j] = acc_s[j];
    return;
  }
  float* sums = a.sums != nullptr ? a.sums + slot * c : nullptr;
  const float q_sum = scalars[kQuerySum];
  if (tid == 0) {
    // Read sums[E] before any thread updates it (barrier below).
    float n = __fmul_rn(a.scale, acc_s[e]);
    if (sums != nullptr) n = __fmaf_rn(__fmul_rn(a.offset, q_sum), __fadd_rn(sums[e], 1.0f), n);
    scalars[kDenominator] = __fmaf_rn(a.eps, q_sum, n);
  }
  __syncthreads();
  const float denominator = scalars[kDenominator];
  for (int j = tid; j < c; j += threads) {
    float n = __fmul_rn(a.scale, acc_s[j]);
    if (sums != nullptr) {
      const float s = __fadd_rn(sums[j], j < e ? v[j] : 1.0f);
      sums[j] = s;
      n = __fmaf_rn(__fmul_rn(a.offset, q_sum), s, n);
    }
    if (j < e) row.out[j] = __fdiv_rn(n, denominator);
  }
}

// Features [f_begin, f_end) of one row's state (M x C at `state`, C =
// E + 1): S = decay S + k (x) [v, 1] and the column sums acc_s[j] = sum_f
// q_f S[f, j] of those features. With C <= threads, thread t owns column
// t % C of features f_begin + t / C, + G, ... (G = threads / C groups): the
// block walks the rows' M x C state as one contiguous array, so every load
// and store is coalesced and no lane idles on a partial warp of columns.
// Wider states take the columns threads at a time (G = 1). Each state
// element is read and written once; loads are batched kUnroll deep so that
// each thread keeps several in flight. partial: blockDim.x floats. Ends with
// a barrier. The arithmetic is spelled out as WriteOutput's. `state` may be
// global or shared memory.
__device__ void UpdateFeatures(float* state, const float* v, int f_begin, int f_end, int c,
                               float decay, const float* q_s, const float* k_s, float* partial,
                               float* acc_s) {
  const int e = c - 1;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const bool grouped = c <= threads;
  const int groups = grouped ? threads / c : 1;
  const int64_t stride = static_cast<int64_t>(groups) * c;
  for (int j0 = 0; j0 < c; j0 += grouped ? c : threads) {
    const int j = grouped ? tid % c : j0 + tid;
    const int f0 = f_begin + (grouped ? tid / c : 0);
    const bool active = grouped ? tid < groups * c : j < c;
    float acc = 0.0f;
    if (active) {
      const float vj = j < e ? v[j] : 1.0f;
      float* s = state + static_cast<int64_t>(f0) * c + j;
      int f = f0;
      constexpr int kUnroll = 8;
      for (; f + (kUnroll - 1) * groups < f_end; f += kUnroll * groups, s += kUnroll * stride) {
        float x[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) x[u] = s[u * stride];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int fu = f + u * groups;
          x[u] = __fmaf_rn(k_s[fu], vj, __fmul_rn(x[u], decay));
          s[u * stride] = x[u];
          acc = __fmaf_rn(q_s[fu], x[u], acc);
        }
      }
      for (; f < f_end; f += groups, s += stride) {
        const float updated = __fmaf_rn(k_s[f], vj, __fmul_rn(*s, decay));
        *s = updated;
        acc = __fmaf_rn(q_s[f], updated, acc);
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
}

// The row-block kernels' shared memory, in floats (RowBlockSharedFloats):
// q (M) | k (M) | acc (E + 1) | partial (blockDim.x) | scalars | x (2 D,
// with head_inputs), from `base`.
struct RowBlockShared {
  float* q_s;
  float* k_s;
  float* acc_s;
  float* partial;
  float* scalars;
  float* x_s;
};

__device__ RowBlockShared SliceRowBlockShared(const LinearStateStepArgs& a, float* base) {
  RowBlockShared sh{};
  sh.q_s = base;
  sh.k_s = sh.q_s + a.features;
  sh.acc_s = sh.k_s + a.features;
  sh.partial = sh.acc_s + a.columns;
  sh.scalars = sh.partial + blockDim.x;
  sh.x_s = sh.scalars + kScalars;
  return sh;
}

// One row's step by the whole block: features, the update and read-out of
// every feature of `state` (the row's M x (E + 1) state, in global or shared
// memory), output. The row-block kernel runs it once, the scan kernel once
// per token: one body, so a scan has the steps' bits. Ends after
// WriteOutput; the caller puts a barrier before the block's next use of the
// shared memory.
__device__ void StepRowBlock(const LinearStateStepArgs& a, const RowView& row, int64_t slot,
                             float* state, const RowBlockShared& sh) {
  const int m = static_cast<int>(a.features);
  const int c = static_cast<int>(a.columns);
  // 1. The q and k features of the row, staged in shared memory.
  StageFeatures(a, row, slot, sh.q_s, sh.k_s, sh.x_s, sh.scalars);
  if (FavorFeaturesInStep(a) && threadIdx.x == 0) a.key_max[slot] = sh.scalars[kNewKeyMax];
  // 2. Update and read-out of every feature.
  UpdateFeatures(state, row.v, 0, m, c, sh.scalars[kDecay], sh.q_s, sh.k_s, sh.partial, sh.acc_s);
  // 3. Output.
  WriteOutput(a, row, slot, sh.acc_s, sh.scalars);
}

// Block r steps row r (see the header); blocks are one-dimensional.
// 56 registers: four blocks per SM (50% occupancy). Forcing six (40
// registers, a few spilled) is slower on sm_90.
__global__ void LinearStateStepKernel(LinearStateStepArgs a) {
  extern __shared__ float shared[];
  const int m = static_cast<int>(a.features);
  const int c = static_cast<int>(a.columns);
  const int e = c - 1;
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
  StepRowBlock(a, StepRow(a, r), slot, a.state + slot * static_cast<int64_t>(m) * c,
               SliceRowBlockShared(a, shared));
}

// Block r scans state r through the tokens in order (LinearStateScanForward),
// each token by StepRowBlock. With `staged`, the row's state is read into
// shared memory before the first token and written back after the last,
// ahead of the row-block floats (M (E + 1) more): each token then updates it
// there, with the same arithmetic on the same values.
__global__ void LinearStateScanKernel(LinearStateScanArgs s, bool staged) {
  extern __shared__ float shared[];
  const LinearStateStepArgs& a = s.step;
  const int64_t elements = a.features * a.columns;
  const int64_t r = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  float* global_state = a.state + r * elements;
  float* state = global_state;
  const RowBlockShared sh = SliceRowBlockShared(a, staged ? shared + elements : shared);
  if (staged) {
    for (int64_t i = tid; i < elements; i += threads) shared[i] = global_state[i];
    state = shared;
    __syncthreads();
  }
  for (int64_t t = 0; t < s.tokens; ++t) {
    StepRowBlock(a, RowAt(a, r, s.heads, s.tokens, t), r, state, sh);
    // The next token restages q, k and the scalars, and thread 0 reads the
    // running sums other threads wrote.
    __syncthreads();
  }
  if (staged) {
    for (int64_t i = tid; i < elements; i += threads) global_state[i] = shared[i];
  }
}

// The cluster kernel (CudaStepKernel::kClusterSplit, sm_90): the
// kStepClusterSize blocks of a thread-block cluster share row r = blockIdx.x
// / kStepClusterSize; block c of the cluster updates features [c F, (c + 1)
// F) of the row's state, F = ceil(M / kStepClusterSize), so a small batch
// keeps kStepClusterSize times as many SMs busy and each thread has one
// round of loads in flight instead of several. Every block stages all of
// the row's features (the FAVOR+ maxima and the query sum need them). The
// first block of the cluster adds the blocks' column sums, read from their
// shared memory (distributed shared memory) in rank order, then writes the
// output, the running sums and the key maximum. No workspace, no atomics.
// Shared memory as the row-block kernel.
__global__ void __cluster_dims__(kStepClusterSize, 1, 1)
    LinearStateStepClusterKernel(LinearStateStepArgs a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ float shared[];
  const int m = static_cast<int>(a.features);
  const int c = static_cast<int>(a.columns);
  const int e = c - 1;
  const RowBlockShared sh = SliceRowBlockShared(a, shared);
  float* q_s = sh.q_s;
  float* k_s = sh.k_s;
  float* acc_s = sh.acc_s;
  float* partial = sh.partial;
  float* scalars = sh.scalars;
  float* x_s = sh.x_s;
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t r = blockIdx.x / kStepClusterSize;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int64_t slot = a.slots != nullptr ? a.slots[r] : r;
  const int out_columns = a.normalize ? e : c;
  if (slot < 0 || slot >= a.pool) {
    // Cluster-uniform exit (one row per cluster), before any barrier.
    if (rank == 0) {
      for (int j = tid; j < out_columns; j += threads) a.out[r * out_columns + j] = CUDART_NAN_F;
    }
    return;
  }
  float* state = a.state + slot * static_cast<int64_t>(m) * c;
  const RowView row = StepRow(a, r);
  StageFeatures(a, row, slot, q_s, k_s, x_s, scalars);
  const int share = (m + kStepClusterSize - 1) / kStepClusterSize;
  const int f_begin = min(m, rank * share), f_end = min(m, f_begin + share);
  UpdateFeatures(state, row.v, f_begin, f_end, c, scalars[kDecay], q_s, k_s, partial, acc_s);
  // Every block's column sums are complete and every block has read the old
  // key maximum.
  cluster.sync();
  if (rank == 0) {
    // Thread j alone reads and then overwrites the first block's acc_s[j];
    // no other block reads the first block's sums.
    for (int j = tid; j < c; j += threads) {
      float total = 0.0f;
      for (int b = 0; b < kStepClusterSize; ++b) total += cluster.map_shared_rank(acc_s, b)[j];
      acc_s[j] = total;
    }
  }
  // The other blocks keep their shared memory until the first has read it.
  cluster.sync();
  if (rank != 0) return;
  if (FavorFeaturesInStep(a) && tid == 0) a.key_max[slot] = scalars[kNewKeyMax];
  WriteOutput(a, row, slot, acc_s, scalars);
#else
  __trap();  // launched only on sm_90 and later (LinearStateStepClusterForward)
#endif
}

// The vector kernel (linear_state_step_plan.h): block (r, s) steps periods
// [s P, (s + 1) P) of row r's flat state, P = plan.periods_per_split.
// Shared memory, in floats: partial (4 T, first: 16-byte aligned) | q (M) |
// k (M) | acc (E + 1) | scalars | x (2 D, with head_inputs).
constexpr int kVectorUnroll = 4;  // 16-byte loads in flight per thread

// One state element s of feature f: S = decay S + k_f v, acc += q_f S.
__device__ __forceinline__ void UpdateLane(float& s, int f, float v, float decay, const float* k_s,
                                           const float* q_s, float& acc) {
  s = s * decay + k_s[f] * v;
  acc += q_s[f] * s;
}

__global__ void __launch_bounds__(kVectorStepMaxThreads)
    LinearStateStepVectorKernel(LinearStateStepArgs a, VectorStepPlan plan, float* workspace) {
  extern __shared__ float4 shared4[];
  const int m = static_cast<int>(a.features);
  const int c = static_cast<int>(a.columns);
  const int e = c - 1;
  float* partial = reinterpret_cast<float*>(shared4);
  float* q_s = partial + plan.period;
  float* k_s = q_s + m;
  float* acc_s = k_s + m;
  float* scalars = acc_s + c;
  float* x_s = scalars + kScalars;
  const int64_t r = blockIdx.x;
  const int64_t split = blockIdx.y;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int64_t slot = a.slots != nullptr ? a.slots[r] : r;
  if (slot < 0 || slot >= a.pool) {
    // Block-uniform exit, before any barrier; the row's first split writes
    // the NaN row. No split of this row reaches the workspace counter.
    const int out_columns = a.normalize ? e : c;
    if (split == 0) {
      for (int j = tid; j < out_columns; j += threads) a.out[r * out_columns + j] = CUDART_NAN_F;
    }
    return;
  }
  const int64_t elements = static_cast<int64_t>(m) * c;
  float4* state = reinterpret_cast<float4*>(a.state + slot * elements);
  const RowView row = StepRow(a, r);
  const float* v = row.v;

  // 1. Features (every split computes them: 2 M values, and with
  // head_inputs their projection, against its share of the M x C state).
  StageFeatures(a, row, slot, q_s, k_s, x_s, scalars);
  const float decay = scalars[kDecay];

  // 2. Update and read-out. Lane u of thread t is flat offset 4 t + u of
  // every period: its column, and so v and the partial sum, are fixed.
  int lane_feature[4];
  float lane_v[4];
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int64_t lane = 4 * static_cast<int64_t>(tid) + u;
    const int64_t j = VectorLaneColumn(lane, c);
    lane_feature[u] = static_cast<int>(VectorLaneFeature(lane, 0, plan, c));
    lane_v[u] = j < e ? v[j] : 1.0f;
  }
  const int64_t first = split * plan.periods_per_split;
  const int64_t last =
      first + plan.periods_per_split < plan.periods ? first + plan.periods_per_split : plan.periods;
  const int64_t vectors = elements / 4;  // whole: M C % 4 == 0
  for (int64_t n0 = first; n0 < last; n0 += kVectorUnroll) {
    float4 x[kVectorUnroll];
#pragma unroll
    for (int i = 0; i < kVectorUnroll; ++i) {
      const int64_t index = (n0 + i) * threads + tid;  // in float4s
      if (n0 + i < last && index < vectors) x[i] = state[index];
    }
#pragma unroll
    for (int i = 0; i < kVectorUnroll; ++i) {
      const int64_t index = (n0 + i) * threads + tid;
      if (n0 + i < last && index < vectors) {
        const int f = static_cast<int>((n0 + i) * plan.features_per_period);
        // Named components, not an index into x[i]: that would put x in
        // local memory.
        UpdateLane(x[i].x, f + lane_feature[0], lane_v[0], decay, k_s, q_s, acc[0]);
        UpdateLane(x[i].y, f + lane_feature[1], lane_v[1], decay, k_s, q_s, acc[1]);
        UpdateLane(x[i].z, f + lane_feature[2], lane_v[2], decay, k_s, q_s, acc[2]);
        UpdateLane(x[i].w, f + lane_feature[3], lane_v[3], decay, k_s, q_s, acc[3]);
        state[index] = x[i];
      }
    }
  }
  reinterpret_cast<float4*>(partial)[tid] = make_float4(acc[0], acc[1], acc[2], acc[3]);
  __syncthreads();
  // Column j's partial sums sit at lanes j, j + C, ... of the period.
  for (int j = tid; j < c; j += threads) {
    float total = 0.0f;
    for (int64_t i = 0; i < plan.features_per_period; ++i) total += partial[j + i * c];
    acc_s[j] = total;
  }
  __syncthreads();

  // 3. With several splits, the row's blocks add their sums into the
  // workspace; the last to arrive (a ticket after a fence, as in CUDA's
  // threadFenceReduction sample) reads the totals from L2 and finishes.
  if (plan.splits > 1) {
    float* row_sums = workspace + r * c;
    unsigned int* tickets = reinterpret_cast<unsigned int*>(workspace + a.rows * c);
    for (int j = tid; j < c; j += threads) atomicAdd(row_sums + j, acc_s[j]);
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      const unsigned int ticket = atomicAdd(tickets + r, 1u);
      scalars[kLastBlock] = ticket + 1 == static_cast<unsigned int>(plan.splits) ? 1.0f : 0.0f;
    }
    __syncthreads();
    if (scalars[kLastBlock] == 0.0f) return;  // block-uniform
    __threadfence();
    for (int j = tid; j < c; j += threads) acc_s[j] = __ldcg(row_sums + j);
    __syncthreads();
  }
  // Every split has read key_max[slot] by now (its ticket came after).
  if (FavorFeaturesInStep(a) && tid == 0) a.key_max[slot] = scalars[kNewKeyMax];
  WriteOutput(a, row, slot, acc_s, scalars);
}

const char* CheckArgs(const LinearStateStepArgs& args) {
  if (args.features < 1 || args.columns < 1) return "M and E + 1 must be positive";
  if (args.slots == nullptr && args.pool < args.rows) return "fewer states than rows";
  if (args.projections != nullptr && args.head_inputs != nullptr) {
    return "give the FAVOR+ step projections or head_inputs, not both";
  }
  if (FavorFeaturesInStep(args) && (args.heads < 1 || args.key_max == nullptr || !args.normalize ||
                                    (args.projections != nullptr && args.diag == nullptr))) {
    return "FAVOR+ step needs heads >= 1, diag, key_max and normalisation";
  }
  if (args.head_inputs != nullptr && (args.projection_t == nullptr || args.head_dim < 1)) {
    return "the FAVOR+ projection needs projection_t and D >= 1";
  }
  if (!FavorFeaturesInStep(args) && (args.q == nullptr || args.k == nullptr)) {
    return "q and k are required without projections";
  }
  if (args.rows > 0x7fffffff) return "too many rows for one grid";
  return nullptr;
}

// Floats of the staged query and key vectors (2 D with head_inputs).
int64_t HeadInputFloats(const LinearStateStepArgs& args) {
  return args.head_inputs != nullptr ? 2 * args.head_dim : 0;
}

// Shared floats of the row-block and cluster kernels (blocks of
// kThreadsPerBlock).
int64_t RowBlockSharedFloats(const LinearStateStepArgs& args) {
  return 2 * args.features + args.columns + kThreadsPerBlock + kScalars + HeadInputFloats(args);
}

int64_t VectorSharedFloats(const LinearStateStepArgs& args, const VectorStepPlan& plan) {
  return plan.period + 2 * args.features + args.columns + kScalars + HeadInputFloats(args);
}

}  // namespace

const char* LinearStateStepForward(const LinearStateStepArgs& args, void* stream) {
  if (const char* error = CheckArgs(args)) return error;
  if (args.rows == 0) return nullptr;
  const int64_t shared_floats = RowBlockSharedFloats(args);
  if (shared_floats > kMaxStateStepSharedFloats) {
    return "2 M + E (+ 2 D) too large for shared memory";
  }
  LinearStateStepKernel<<<static_cast<unsigned>(args.rows), kThreadsPerBlock,
                          sizeof(float) * static_cast<size_t>(shared_floats),
                          static_cast<cudaStream_t>(stream)>>>(args);
  return LaunchError();
}

const char* LinearStateScanForward(const LinearStateScanArgs& args, int device, void* stream) {
  const LinearStateStepArgs& a = args.step;
  if (const char* error = CheckArgs(a)) return error;
  if (a.slots != nullptr || a.pool != a.rows) return "a scan steps every state, without slots";
  if (args.tokens < 0 || args.heads < 1 || a.rows % args.heads != 0) {
    return "a scan needs T >= 0 and rows a multiple of H >= 1";
  }
  if (FavorFeaturesInStep(a) && a.heads != args.heads) return "the FAVOR+ heads differ from H";
  if (a.rows == 0 || args.tokens == 0) return nullptr;
  const int64_t row_floats = RowBlockSharedFloats(a);
  if (row_floats > kMaxStateStepSharedFloats) return "2 M + E (+ 2 D) too large for shared memory";
  int most_bytes = 0;
  if (cudaDeviceGetAttribute(&most_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
      cudaSuccess) {
    cudaGetLastError();  // clear it: the state then stays in global memory
    most_bytes = 0;
  }
  const int64_t staged_floats = row_floats + a.features * a.columns;
  const bool staged = static_cast<int64_t>(sizeof(float)) * staged_floats <= most_bytes;
  const size_t bytes = sizeof(float) * static_cast<size_t>(staged ? staged_floats : row_floats);
  if (staged) {
    // The device's limit, the same value from every caller, so that calls
    // from other threads cannot lower it under this launch.
    const cudaError_t err = cudaFuncSetAttribute(
        LinearStateScanKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most_bytes);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return cudaGetErrorString(err);
    }
  }
  LinearStateScanKernel<<<static_cast<unsigned>(a.rows), kThreadsPerBlock, bytes,
                          static_cast<cudaStream_t>(stream)>>>(args, staged);
  return LaunchError();
}

bool ClusterStepSupported(int device) {
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    cudaGetLastError();  // clear it
    return false;
  }
  return major >= 9;
}

const char* LinearStateStepClusterForward(const LinearStateStepArgs& args, void* stream) {
  if (const char* error = CheckArgs(args)) return error;
  if (args.rows == 0) return nullptr;
  if (args.rows > 0x7fffffff / kStepClusterSize) return "too many rows for one grid";
  const int64_t shared_floats = RowBlockSharedFloats(args);
  if (shared_floats > kMaxStateStepSharedFloats) {
    return "2 M + E (+ 2 D) too large for shared memory";
  }
  LinearStateStepClusterKernel<<<
      static_cast<unsigned>(args.rows * kStepClusterSize), kThreadsPerBlock,
      sizeof(float) * static_cast<size_t>(shared_floats), static_cast<cudaStream_t>(stream)>>>(
      args);
  return LaunchError();
}

VectorStepPlan VectorStepPlanFor(const LinearStateStepArgs& args, int device) {
  int sm_count = 0;
  if (cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();  // clear it: the plan then assumes one SM
    sm_count = 1;
  }
  VectorStepPlan plan = MakeVectorStepPlan(args.rows, args.features, args.columns, sm_count);
  if (plan.supported && VectorSharedFloats(args, plan) > kMaxStateStepSharedFloats) {
    plan.supported = false;
  }
  return plan;
}

const char* LinearStateStepVectorForward(const LinearStateStepArgs& args,
                                         const VectorStepPlan& plan, float* workspace,
                                         void* stream) {
  if (const char* error = CheckArgs(args)) return error;
  if (args.rows == 0) return nullptr;
  if (!plan.supported) return "shape not supported by the vector kernel (M (E + 1) % 4 != 0)";
  if (plan.workspace_floats > 0 && workspace == nullptr) return "the split needs a workspace";
  const dim3 grid(static_cast<unsigned>(args.rows), static_cast<unsigned>(plan.splits));
  LinearStateStepVectorKernel<<<grid, static_cast<unsigned>(plan.threads),
                                sizeof(float) * static_cast<size_t>(VectorSharedFloats(args, plan)),
                                static_cast<cudaStream_t>(stream)>>>(args, plan, workspace);
  return LaunchError();
}

}  // namespace performer::kernels::cuda
