#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <climits>
#include <cstddef>
#include <type_traits>

#include "kernels/cuda/causal_linear_prefill_cuda.h"
#include "kernels/cuda/float_conversion.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 16;  // wmma m = n = k

__host__ __device__ constexpr int RoundUp16(int x) { return (x + 15) / 16 * 16; }
__host__ __device__ constexpr size_t Align32(size_t bytes) { return (bytes + 31) / 32 * 32; }

// Byte offsets of the shared-memory arrays of one block (C = kChunk,
// mp = M rounded up to 16, et = the column tile).
struct Layout {
  int ldq = 0;  // leading dimension of Qc, Kc (elements)
  size_t q = 0, k = 0, v = 0, p = 0, scratch = 0, state = 0, state_lp = 0, total = 0;
};

template <typename T, int kChunk>
__host__ __device__ Layout MakeLayout(int mp, int et) {
  constexpr bool kTensorCores = !std::is_same<T, float>::value;
  Layout s;
  // The float32 (SIMT) path reads Kc rows with a stride: one extra column
  // keeps those reads off a single bank. wmma needs ld % 8 == 0 (16-bit) and
  // 32-byte aligned tiles, which mp satisfies.
  s.ldq = kTensorCores ? mp : mp + 1;
  size_t off = 0;
  s.q = off;
  off += Align32(sizeof(T) * kChunk * s.ldq);
  s.k = off;
  off += Align32(sizeof(T) * kChunk * s.ldq);
  s.v = off;
  off += Align32(sizeof(T) * kChunk * et);
  s.p = off;
  off += Align32(sizeof(T) * kChunk * kChunk);
  s.scratch = off;
  if (kTensorCores) off += Align32(sizeof(float) * kChunk * (kChunk > et ? kChunk : et));
  s.state = off;
  off += Align32(sizeof(float) * static_cast<size_t>(mp) * et);
  s.state_lp = off;
  if (kTensorCores) off += Align32(sizeof(T) * static_cast<size_t>(mp) * et);
  s.total = off;
  return s;
}

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

// One chunk on tensor cores (T = bfloat16 / half). On entry Qc, Kc, Vc are
// staged and visible; on exit the state (and its T copy) are updated and
// visible, and the chunk's output rows are written.
template <typename T, int kChunk>
__device__ void ChunkTensorCores(const Smem<T>& s, float* __restrict__ out_rows, int rows, int mp,
                                 int et, int e0, int e) {
  using namespace nvcuda;
  using FragA = wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, T, wmma::row_major>;
  using FragAT = wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, T, wmma::col_major>;
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
  for (int i = tid; i < mp * et; i += kThreads) {
    const int r = i / et, c = i % et;
    float acc = s.state[i];
    for (int j = 0; j < rows; ++j) acc = fmaf(s.k[j * ld + r], s.v[j * et + c], acc);
    s.state[i] = acc;
  }
  __syncthreads();
}

template <typename T, int kChunk>
__global__ void __launch_bounds__(kThreads)
    CausalLinearPrefillKernel(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const float* __restrict__ initial_state,
                              float* __restrict__ out, float* __restrict__ final_state,
                              int64_t length, int m, int e, int mp, int et, int e_tiles) {
  constexpr bool kTensorCores = !std::is_same<T, float>::value;
  extern __shared__ __align__(128) unsigned char smem_bytes[];
  const Layout layout = MakeLayout<T, kChunk>(mp, et);
  Smem<T> s;
  s.q = reinterpret_cast<T*>(smem_bytes + layout.q);
  s.k = reinterpret_cast<T*>(smem_bytes + layout.k);
  s.v = reinterpret_cast<T*>(smem_bytes + layout.v);
  s.p = reinterpret_cast<T*>(smem_bytes + layout.p);
  s.scratch = reinterpret_cast<float*>(smem_bytes + layout.scratch);
  s.state = reinterpret_cast<float*>(smem_bytes + layout.state);
  s.state_lp = reinterpret_cast<T*>(smem_bytes + layout.state_lp);
  s.ldq = layout.ldq;

  const int64_t b = blockIdx.x / e_tiles;
  const int e0 = static_cast<int>(blockIdx.x % e_tiles) * et;
  const int tid = static_cast<int>(threadIdx.x);
  const T* qb = q + b * length * m;
  const T* kb = k + b * length * m;
  const T* vb = v + b * length * e;
  float* ob = out + b * length * e;

  for (int i = tid; i < mp * et; i += kThreads) {
    const int r = i / et, c = i % et;
    float value = 0.f;
    if (initial_state != nullptr && r < m && e0 + c < e) {
      value = initial_state[(b * m + r) * e + e0 + c];
    }
    s.state[i] = value;
    if constexpr (kTensorCores) s.state_lp[i] = FromFloat<T>(value);
  }
  const T zero = FromFloat<T>(0.f);
  for (int64_t c0 = 0; c0 < length; c0 += kChunk) {
    const int rows = static_cast<int>(length - c0 < kChunk ? length - c0 : kChunk);
    // 1. Stage the chunk, zero padded (consecutive threads read consecutive
    // features of a row: coalesced).
    for (int i = tid; i < kChunk * mp; i += kThreads) {
      const int r = i / mp, c = i % mp;
      const bool valid = r < rows && c < m;
      const int64_t g = (c0 + r) * m + c;
      s.q[r * s.ldq + c] = valid ? qb[g] : zero;
      s.k[r * s.ldq + c] = valid ? kb[g] : zero;
    }
    for (int i = tid; i < kChunk * et; i += kThreads) {
      const int r = i / et, c = i % et;
      s.v[i] = (r < rows && e0 + c < e) ? vb[(c0 + r) * e + e0 + c] : zero;
    }
    __syncthreads();  // also orders the previous chunk's state update
    if constexpr (kTensorCores) {
      ChunkTensorCores<T, kChunk>(s, ob + c0 * e, rows, mp, et, e0, e);
    } else {
      ChunkSimt<kChunk>(s, ob + c0 * e, rows, mp, et, e0, e);
    }
  }
  __syncthreads();
  for (int i = tid; i < mp * et; i += kThreads) {
    const int r = i / et, c = i % et;
    if (r < m && e0 + c < e) final_state[(b * m + r) * e + e0 + c] = s.state[i];
  }
}

template <typename T, int kChunk>
const char* Launch(const void* q, const void* k, const void* v, const float* initial_state,
                   float* out, float* final_state, int64_t batch_heads, int64_t length, int m,
                   int e, cudaStream_t stream) {
  int device = 0, max_smem = 0, sms = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err == cudaSuccess) {
    err = cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  }
  if (err == cudaSuccess)
    err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  const int mp = RoundUp16(m);
  const int ep = RoundUp16(e);
  // The widest column tile (all of E when it fits, at most 128) whose
  // shared memory fits the device.
  int et = 0;
  const int candidates[] = {ep < 128 ? ep : 128, 64, 32, 16};
  for (int candidate : candidates) {
    if (candidate > ep) continue;
    if (MakeLayout<T, kChunk>(mp, candidate).total <= static_cast<size_t>(max_smem)) {
      et = candidate;
      break;
    }
  }
  if (et == 0) return "feature dimension M too large for the shared memory of one block";
  // Few sequences: narrower tiles for more blocks (each recomputes Qc Kc^T).
  while (et > 32 && batch_heads * ((e + et - 1) / et) < sms) {
    const int narrower = RoundUp16(et / 2);
    if (narrower >= et) break;
    et = narrower;
  }
  const int e_tiles = (e + et - 1) / et;
  if (batch_heads * e_tiles > INT_MAX) return "too many sequences for one grid";
  const size_t shared_bytes = MakeLayout<T, kChunk>(mp, et).total;
  err = cudaFuncSetAttribute(CausalLinearPrefillKernel<T, kChunk>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared_bytes));
  if (err != cudaSuccess) return cudaGetErrorString(err);
  CausalLinearPrefillKernel<T, kChunk>
      <<<static_cast<unsigned>(batch_heads * e_tiles), kThreads, shared_bytes, stream>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
          initial_state, out, final_state, length, m, e, mp, et, e_tiles);
  err = cudaGetLastError();
  return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

}  // namespace

const char* CausalLinearPrefillForward(PrefillDtype dtype, const void* q, const void* k,
                                       const void* v, const float* initial_state, float* out,
                                       float* final_state, int64_t batch_heads, int64_t length,
                                       int64_t feature_dims, int64_t value_dims, void* stream) {
  if (feature_dims > 4096 || value_dims > (int64_t{1} << 20)) return "M or E too large";
  if (batch_heads == 0 || value_dims == 0) return nullptr;
  const int m = static_cast<int>(feature_dims), e = static_cast<int>(value_dims);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case PrefillDtype::kBFloat16:
      return Launch<__nv_bfloat16, 64>(q, k, v, initial_state, out, final_state, batch_heads,
                                       length, m, e, s);
    case PrefillDtype::kFloat16:
      return Launch<__half, 64>(q, k, v, initial_state, out, final_state, batch_heads, length, m, e,
                                s);
    case PrefillDtype::kFloat32:
      return Launch<float, 32>(q, k, v, initial_state, out, final_state, batch_heads, length, m, e,
                               s);
  }
  return "unknown dtype";
}

}  // namespace performer::kernels::cuda
