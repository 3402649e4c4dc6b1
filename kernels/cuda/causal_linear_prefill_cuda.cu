#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cstddef>
#include <type_traits>

#include "kernels/cuda/causal_linear_prefill_cuda.h"
#include "kernels/cuda/causal_linear_prefill_plan.h"
#include "kernels/cuda/float_conversion.cuh"
#include "kernels/cuda/launch_status.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 16;  // wmma m = n = k

// Pointers into one block's shared memory.
template <typename T>
struct Smem {
  T* q;
  T* k;
  T* v;
  T* p;
  float* scratch;
  float* state;
  T* state_lp;  // the state rounded to T (tensor-core operand)
  int ldq;
};

// S += Kc^T Vc on tensor cores (float32 state, T operands); ends with a
// barrier, after which the float32 state is visible.
template <typename T>
__device__ void UpdateStateTensorCores(const Smem<T>& s, int rows, int mp, int et) {
  using namespace nvcuda;
  using FragAT = wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, T, wmma::col_major>;
  using FragB = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, T, wmma::row_major>;
  using FragC = wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float>;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int ld = s.ldq;
  const int col_tiles = et / kTile;
  const int state_tiles = (mp / kTile) * col_tiles;
  for (int t = warp; t < state_tiles; t += kWarps) {
    const int ti = t / col_tiles, tj = t % col_tiles;
    float* tile = s.state + ti * kTile * et + tj * kTile;
    FragC acc;
    wmma::load_matrix_sync(acc, tile, et, wmma::mem_row_major);
    for (int x = 0; x < rows; x += kTile) {  // rows past `rows` are zero
      FragAT a;                              // A = Kc^T: element (i, x) at k[x * ld + i]
      FragB b;
      wmma::load_matrix_sync(a, s.k + x * ld + ti * kTile, ld);
      wmma::load_matrix_sync(b, s.v + x * et + tj * kTile, et);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(tile, acc, et, wmma::mem_row_major);
  }
  __syncthreads();
}

// S += Kc^T Vc in float32 FMAs; ends with a barrier.
__device__ void UpdateStateSimt(const Smem<float>& s, int rows, int mp, int et) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int i = tid; i < mp * et; i += kThreads) {
    const int r = i / et, c = i % et;
    float acc = s.state[i];
    for (int j = 0; j < rows; ++j) acc = fmaf(s.k[j * s.ldq + r], s.v[j * et + c], acc);
    s.state[i] = acc;
  }
  __syncthreads();
}

// One chunk on tensor cores (T = bfloat16 / half). On entry Qc, Kc, Vc are
// staged and visible; on exit the state (and its T copy) are updated and
// visible, and the chunk's output rows are written.
template <typename T, int kChunk>
__device__ void ChunkTensorCores(const Smem<T>& s, float* __restrict__ out_rows, int rows, int mp,
                                 int et, int e0, int e) {
  using namespace nvcuda;
  using FragA = wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, T, wmma::row_major>;
  using FragB = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, T, wmma::row_major>;
  using FragBT = wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, T, wmma::col_major>;
  using FragC = wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float>;
  constexpr int kChunkTiles = kChunk / kTile;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int tid = static_cast<int>(threadIdx.x);
  const int ld = s.ldq;
  const int row_tiles = (rows + kTile - 1) / kTile;  // tiles holding valid tokens
  const int col_tiles = et / kTile;

  // 2. Scores on the lower-triangular tiles (ti >= tj) of valid rows.
  for (int t = warp; t < kChunkTiles * kChunkTiles; t += kWarps) {
    const int ti = t / kChunkTiles, tj = t % kChunkTiles;
    if (tj > ti || ti >= row_tiles) continue;
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    for (int x = 0; x < mp; x += kTile) {
      FragA a;
      FragBT b;  // B = Kc^T: element (x, j) at k[j * ld + x]
      wmma::load_matrix_sync(a, s.q + ti * kTile * ld + x, ld);
      wmma::load_matrix_sync(b, s.k + tj * kTile * ld + x, ld);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(s.scratch + ti * kTile * kChunk + tj * kTile, acc, kChunk,
                            wmma::mem_row_major);
  }
  __syncthreads();
  // Causal mask (j <= i) and rounding to T; the upper tiles become zeros.
  const T zero = FromFloat<T>(0.f);
  for (int i = tid; i < kChunk * kChunk; i += kThreads) {
    const int r = i / kChunk, c = i % kChunk;
    s.p[i] = (c <= r && r < rows) ? FromFloat<T>(s.scratch[i]) : zero;
  }
  __syncthreads();

  // 3. Oc = Qc S + P Vc, staged as float32 in scratch (C x et, ld et).
  for (int t = warp; t < row_tiles * col_tiles; t += kWarps) {
    const int ti = t / col_tiles, tj = t % col_tiles;
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    for (int x = 0; x < mp; x += kTile) {
      FragA a;
      FragB b;
      wmma::load_matrix_sync(a, s.q + ti * kTile * ld + x, ld);
      wmma::load_matrix_sync(b, s.state_lp + x * et + tj * kTile, et);
      wmma::mma_sync(acc, a, b, acc);
    }
    for (int x = 0; x <= ti * kTile; x += kTile) {  // P is zero right of the diagonal tile
      FragA a;
      FragB b;
      wmma::load_matrix_sync(a, s.p + ti * kTile * kChunk + x, kChunk);
      wmma::load_matrix_sync(b, s.v + x * et + tj * kTile, et);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(s.scratch + ti * kTile * et + tj * kTile, acc, et, wmma::mem_row_major);
  }
  __syncthreads();

  // Write the valid part of Oc; meanwhile 4. S += Kc^T Vc (disjoint memory).
  for (int i = tid; i < rows * et; i += kThreads) {
    const int r = i / et, c = i % et;
    if (e0 + c < e) out_rows[static_cast<int64_t>(r) * e + e0 + c] = s.scratch[i];
  }
  UpdateStateTensorCores<T>(s, rows, mp, et);
  for (int i = tid; i < mp * et; i += kThreads) s.state_lp[i] = FromFloat<T>(s.state[i]);
  __syncthreads();
}

// One chunk in float32 FMAs (T = float); same contract as ChunkTensorCores.
template <int kChunk>
__device__ void ChunkSimt(const Smem<float>& s, float* __restrict__ out_rows, int rows, int mp,
                          int et, int e0, int e) {
  const int tid = static_cast<int>(threadIdx.x);
  const int ld = s.ldq;
  // 2. Masked scores.
  for (int i = tid; i < kChunk * kChunk; i += kThreads) {
    const int r = i / kChunk, c = i % kChunk;
    float acc = 0.f;
    if (c <= r && r < rows) {
      const float* qr = s.q + r * ld;
      const float* kr = s.k + c * ld;
      for (int x = 0; x < mp; ++x) acc = fmaf(qr[x], kr[x], acc);
    }
    s.p[i] = acc;
  }
  __syncthreads();
  // 3. Oc = Qc S + P Vc, straight to out.
  for (int i = tid; i < rows * et; i += kThreads) {
    const int r = i / et, c = i % et;
    if (e0 + c >= e) continue;
    float acc = 0.f;
    const float* qr = s.q + r * ld;
    for (int x = 0; x < mp; ++x) acc = fmaf(qr[x], s.state[x * et + c], acc);
    const float* pr = s.p + r * kChunk;
    for (int j = 0; j <= r; ++j) acc = fmaf(pr[j], s.v[j * et + c], acc);
    out_rows[static_cast<int64_t>(r) * e + e0 + c] = acc;
  }
  __syncthreads();
  // 4. S += Kc^T Vc.
  UpdateStateSimt(s, rows, mp, et);
}

// What one launch of the prefill kernel does (see the header's schedule).
enum class Pass : int {
  kWhole = 0,     // one segment per sequence: initial state -> outputs, final state
  kSegments = 1,  // each segment's own sum of k (x) v, from zero, to the workspace
  kOutputs = 2,   // outputs of each segment, from its prefix state in the workspace
};

struct PrefillParams {
  const void* q;
  const void* k;
  const void* v;
  const float* initial_state;
  float* out;
  float* final_state;
  float* workspace;  // (batch_heads, segments, M, E) float32; kSegments / kOutputs
  int64_t length;
  int64_t segment_chunks;  // chunks per segment
  int segments;
  int m, e, mp, et, e_tiles;
  Pass pass;
};

// Stages rows [c0, c0 + rows) of a (L, M) operand into a zero-padded C x mp
// tile with leading dimension ld. 16-bit operands whose M is a multiple of
// 16 (so mp == M and rows are 16-byte aligned) move 16 bytes per load.
template <typename T, int kChunk>
__device__ void StageRows(T* __restrict__ dst, const T* __restrict__ src, int64_t c0, int rows,
                          int m, int mp, int ld) {
  const int tid = static_cast<int>(threadIdx.x);
  constexpr int kPerVector = 16 / sizeof(T);
  if (sizeof(T) == 2 && m % 16 == 0) {
    const int vectors = m / kPerVector;
    for (int i = tid; i < kChunk * vectors; i += kThreads) {
      const int r = i / vectors, c = i % vectors;
      uint4 value = make_uint4(0, 0, 0, 0);
      if (r < rows) value = reinterpret_cast<const uint4*>(src + (c0 + r) * m)[c];
      reinterpret_cast<uint4*>(dst + r * ld)[c] = value;
    }
    return;
  }
  const T zero = FromFloat<T>(0.f);
  for (int i = tid; i < kChunk * mp; i += kThreads) {
    const int r = i / mp, c = i % mp;
    dst[r * ld + c] = (r < rows && c < m) ? src[(c0 + r) * m + c] : zero;
  }
}

template <typename T, int kChunk>
__global__ void __launch_bounds__(kThreads) CausalLinearPrefillKernel(PrefillParams params) {
  constexpr bool kTensorCores = !std::is_same<T, float>::value;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  const int m = params.m, e = params.e, mp = params.mp, et = params.et;
  const PrefillSharedLayout layout =
      MakePrefillSharedLayout(static_cast<int>(sizeof(T)), kChunk, mp, et);
  Smem<T> s;
  s.q = reinterpret_cast<T*>(smem_bytes + layout.q);
  s.k = reinterpret_cast<T*>(smem_bytes + layout.k);
  s.v = reinterpret_cast<T*>(smem_bytes + layout.v);
  s.p = reinterpret_cast<T*>(smem_bytes + layout.p);
  s.scratch = reinterpret_cast<float*>(smem_bytes + layout.scratch);
  s.state = reinterpret_cast<float*>(smem_bytes + layout.state);
  s.state_lp = reinterpret_cast<T*>(smem_bytes + layout.state_lp);
  s.ldq = layout.ldq;

  // Block -> (sequence b, segment, column tile).
  const int e0 = static_cast<int>(blockIdx.x % params.e_tiles) * et;
  const int64_t rest = blockIdx.x / params.e_tiles;
  const int segment = static_cast<int>(rest % params.segments);
  const int64_t b = rest / params.segments;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t length = params.length;
  const T* qb = static_cast<const T*>(params.q) + b * length * m;
  const T* kb = static_cast<const T*>(params.k) + b * length * m;
  const T* vb = static_cast<const T*>(params.v) + b * length * e;
  float* ob = params.out + b * length * e;
  const int64_t begin = segment * params.segment_chunks * kChunk;
  const int64_t end_unclamped = begin + params.segment_chunks * kChunk;
  const int64_t end = end_unclamped < length ? end_unclamped : length;
  // The state this block starts from: the sequence's initial state (whole),
  // zero (segment sums) or the segment's prefix (outputs).
  const float* start = nullptr;
  float* workspace_slice =
      params.workspace != nullptr
          ? params.workspace + (b * params.segments + segment) * static_cast<int64_t>(m) * e
          : nullptr;
  if (params.pass == Pass::kWhole && params.initial_state != nullptr) {
    start = params.initial_state + b * static_cast<int64_t>(m) * e;
  } else if (params.pass == Pass::kOutputs) {
    start = workspace_slice;
  }

  for (int i = tid; i < mp * et; i += kThreads) {
    const int r = i / et, c = i % et;
    const float value = (start != nullptr && r < m && e0 + c < e) ? start[r * e + e0 + c] : 0.f;
    s.state[i] = value;
    if constexpr (kTensorCores) s.state_lp[i] = FromFloat<T>(value);
  }
  const T zero = FromFloat<T>(0.f);
  for (int64_t c0 = begin; c0 < end; c0 += kChunk) {
    const int rows = static_cast<int>(end - c0 < kChunk ? end - c0 : kChunk);
    // 1. Stage the chunk, zero padded (Qc only where outputs are made).
    if (params.pass != Pass::kSegments) StageRows<T, kChunk>(s.q, qb, c0, rows, m, mp, s.ldq);
    StageRows<T, kChunk>(s.k, kb, c0, rows, m, mp, s.ldq);
    for (int i = tid; i < kChunk * et; i += kThreads) {
      const int r = i / et, c = i % et;
      s.v[i] = (r < rows && e0 + c < e) ? vb[(c0 + r) * e + e0 + c] : zero;
    }
    __syncthreads();  // also orders the previous chunk's state update
    if (params.pass == Pass::kSegments) {
      if constexpr (kTensorCores) {
        UpdateStateTensorCores<T>(s, rows, mp, et);
      } else {
        UpdateStateSimt(s, rows, mp, et);
      }
    } else if constexpr (kTensorCores) {
      ChunkTensorCores<T, kChunk>(s, ob + c0 * e, rows, mp, et, e0, e);
    } else {
      ChunkSimt<kChunk>(s, ob + c0 * e, rows, mp, et, e0, e);
    }
  }
  __syncthreads();
  float* destination = nullptr;
  if (params.pass == Pass::kWhole)
    destination = params.final_state + b * static_cast<int64_t>(m) * e;
  if (params.pass == Pass::kSegments) destination = workspace_slice;
  if (destination == nullptr) return;
  for (int i = tid; i < mp * et; i += kThreads) {
    const int r = i / et, c = i % et;
    if (r < m && e0 + c < e) destination[r * e + e0 + c] = s.state[i];
  }
}

// Between the two passes: the workspace's segment sums become exclusive
// prefix states (starting from the initial state), and the final state is
// the last prefix plus the last sum. One thread per (sequence, M x E entry).
__global__ void SegmentPrefixKernel(const float* __restrict__ initial_state,
                                    float* __restrict__ workspace, float* __restrict__ final_state,
                                    int64_t batch_heads, int segments, int64_t state_size) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= batch_heads * state_size) return;
  const int64_t b = i / state_size, x = i % state_size;
  float running = initial_state != nullptr ? initial_state[i] : 0.f;
  float* slice = workspace + b * segments * state_size + x;
  for (int segment = 0; segment < segments; ++segment) {
    const float sum = slice[segment * state_size];
    slice[segment * state_size] = running;
    running += sum;
  }
  final_state[i] = running;
}

// The schedule of a prefill on the current device
// (kernels/cuda/causal_linear_prefill_plan.h), with the device's SM count,
// shared memory and occupancy.
template <typename T, int kChunk>
PrefillSchedule MakePlan(int64_t batch_heads, int64_t length, int m, int e) {
  PrefillSchedule failed;
  int device = 0, max_smem = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  // The occupancy query below sizes blocks up to this; launches set their own.
  if (err == cudaSuccess) {
    err = cudaFuncSetAttribute(CausalLinearPrefillKernel<T, kChunk>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
  }
  if (err != cudaSuccess) {
    failed.error = cudaGetErrorString(err);
    return failed;
  }
  const int mp = RoundUpTo16(m);
  auto shared_bytes = [mp](int et) {
    return MakePrefillSharedLayout(static_cast<int>(sizeof(T)), kChunk, mp, et).total;
  };
  auto resident_per_sm = [](int /*et*/, size_t bytes) {
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, CausalLinearPrefillKernel<T, kChunk>,
                                                      kThreads, bytes) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it, and assume one block
      return 1;
    }
    return blocks;
  };
  const int64_t chunks = (length + kChunk - 1) / kChunk;
  return PlanPrefillSchedule(batch_heads, chunks, e, sms, static_cast<size_t>(max_smem),
                             shared_bytes, resident_per_sm);
}

template <typename T, int kChunk>
int64_t WorkspaceFloats(int64_t batch_heads, int64_t length, int m, int e) {
  const PrefillSchedule plan = MakePlan<T, kChunk>(batch_heads, length, m, e);
  if (plan.error != nullptr || plan.segments == 1) return 0;
  return batch_heads * plan.segments * static_cast<int64_t>(m) * e;
}

template <typename T, int kChunk>
const char* Launch(PrefillParams params, int64_t batch_heads, int64_t workspace_floats,
                   cudaStream_t stream) {
  const PrefillSchedule plan = MakePlan<T, kChunk>(batch_heads, params.length, params.m, params.e);
  if (plan.error != nullptr) return plan.error;
  params.mp = RoundUpTo16(params.m);
  params.et = plan.et;
  params.e_tiles = plan.e_tiles;
  params.segments = plan.segments;
  params.segment_chunks = plan.segment_chunks;
  const int64_t state_size = static_cast<int64_t>(params.m) * params.e;
  if (plan.segments > 1 && (params.workspace == nullptr ||
                            workspace_floats < batch_heads * plan.segments * state_size)) {
    return "workspace smaller than CausalLinearPrefillWorkspaceFloats";
  }
  cudaError_t err = cudaFuncSetAttribute(CausalLinearPrefillKernel<T, kChunk>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(plan.shared_bytes));
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const unsigned blocks = static_cast<unsigned>(batch_heads * plan.segments * plan.e_tiles);
  if (plan.segments == 1) {
    params.pass = Pass::kWhole;
    CausalLinearPrefillKernel<T, kChunk><<<blocks, kThreads, plan.shared_bytes, stream>>>(params);
    return LaunchError();
  }
  params.pass = Pass::kSegments;
  CausalLinearPrefillKernel<T, kChunk><<<blocks, kThreads, plan.shared_bytes, stream>>>(params);
  const int64_t entries = batch_heads * state_size;
  SegmentPrefixKernel<<<static_cast<unsigned>((entries + 255) / 256), 256, 0, stream>>>(
      params.initial_state, params.workspace, params.final_state, batch_heads, plan.segments,
      state_size);
  params.pass = Pass::kOutputs;
  CausalLinearPrefillKernel<T, kChunk><<<blocks, kThreads, plan.shared_bytes, stream>>>(params);
  return LaunchError();
}

}  // namespace

int64_t CausalLinearPrefillWorkspaceFloats(PrefillDtype dtype, int64_t batch_heads, int64_t length,
                                           int64_t feature_dims, int64_t value_dims) {
  if (feature_dims > 4096 || value_dims > (int64_t{1} << 20)) return 0;
  if (batch_heads == 0 || value_dims == 0 || length == 0) return 0;
  const int m = static_cast<int>(feature_dims), e = static_cast<int>(value_dims);
  switch (dtype) {
    case PrefillDtype::kBFloat16:
      return WorkspaceFloats<__nv_bfloat16, 64>(batch_heads, length, m, e);
    case PrefillDtype::kFloat16:
      return WorkspaceFloats<__half, 64>(batch_heads, length, m, e);
    case PrefillDtype::kFloat32:
      return WorkspaceFloats<float, 32>(batch_heads, length, m, e);
  }
  return 0;
}

const char* CausalLinearPrefillForward(PrefillDtype dtype, const void* q, const void* k,
                                       const void* v, const float* initial_state, float* out,
                                       float* final_state, float* workspace,
                                       int64_t workspace_floats, int64_t batch_heads,
                                       int64_t length, int64_t feature_dims, int64_t value_dims,
                                       void* stream) {
  if (feature_dims > 4096 || value_dims > (int64_t{1} << 20)) return "M or E too large";
  if (batch_heads == 0 || value_dims == 0) return nullptr;
  PrefillParams params{};
  params.q = q;
  params.k = k;
  params.v = v;
  params.initial_state = initial_state;
  params.out = out;
  params.final_state = final_state;
  params.workspace = workspace;
  params.length = length;
  params.m = static_cast<int>(feature_dims);
  params.e = static_cast<int>(value_dims);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case PrefillDtype::kBFloat16:
      return Launch<__nv_bfloat16, 64>(params, batch_heads, workspace_floats, s);
    case PrefillDtype::kFloat16:
      return Launch<__half, 64>(params, batch_heads, workspace_floats, s);
    case PrefillDtype::kFloat32:
      return Launch<float, 32>(params, batch_heads, workspace_floats, s);
  }
  return "unknown dtype";
}

}  // namespace performer::kernels::cuda
