// Runs CUDA kernels of kernels/cuda on the host, so that their logic is
// tested where there is no GPU: a .cu file, rewritten by
// emulate_cuda_source.py (launches, shared-memory declarations), compiles as
// C++ against this header and the CUDA headers of include/ beside it.
//
// What it models: a launch runs its blocks one after another (the blocks of
// a thread-block cluster together). Each CUDA thread is a fiber (its own
// stack, switched by swapcontext) on the launching thread; a fiber runs until
// it reaches a barrier (__syncthreads, __syncwarp, a warp shuffle or ballot,
// a cluster's sync) or returns, and a barrier lets its threads on once every
// thread of its block, warp or cluster that has not returned is waiting
// there, as on the device. The schedule is deterministic. Threads that wait
// at different barriers that can never all be met (a barrier in divergent
// code) abort the process, saying so. Dynamic shared memory is one buffer
// per block, 128-byte aligned and filled with 0xff bytes (NaN as float)
// before the block, so that
// a read of what the block never wrote shows. A launch is refused, as by the
// CUDA runtime, with more than 1,024 threads, a grid past 2^31 - 1 x 65,535
// x 65,535, or more dynamic shared memory than the kernel's limit (48 KiB,
// or what cudaFuncSetAttribute raised it to, at most the device's 227 KiB).
// The device it reports: an sm_90 (compute capability 9.0, __CUDA_ARCH__
// 900) of 132 SMs.
//
// What it does not model: timing, occupancy, the memory model beyond the
// barriers, and the device's rounding: expf, erff and rsqrtf are the host's,
// and a tensor-core product (include/mma.h) sums in float32 in k order.
// Races between barriers do not show (the fibers take turns). A kernel's
// bits under emulation are not the GPU's; what tests compare bit for bit
// under emulation is two paths of the same kernels (a scan against its
// steps, a row among others), which share their arithmetic on either.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __align__(n) __attribute__((aligned(n)))

// ---- Vector types -------------------------------------------------------

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct float1 {
  float x;
};
struct __attribute__((aligned(8))) float2 {
  float x, y;
};
struct float3 {
  float x, y, z;
};
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};
struct __attribute__((aligned(16))) int4 {
  int x, y, z, w;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// ---- Runtime API ----------------------------------------------------------

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9,
};
using cudaError = cudaError_t;
struct CUstream_st;
using cudaStream_t = CUstream_st*;
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

namespace performer::cuda_emulation {

constexpr int kSmCount = 132;
constexpr int kDefaultSharedBytes = 48 * 1024;
constexpr int kOptinSharedBytes = 227 * 1024;
constexpr int kSharedBytesPerSm = 228 * 1024;

// The launching thread's last error (cudaGetLastError reads and clears it).
void SetLastError(cudaError_t error);
cudaError_t TakeLastError();
// The dynamic shared memory limit of a kernel (48 KiB unless raised).
void SetSharedLimit(const void* kernel, int bytes);
int SharedLimit(const void* kernel);

// Runs `body` as a grid: blocks in order, each by block.x * block.y *
// block.z fibers, and the cluster.x blocks of a cluster (consecutive in x;
// 1: no clusters) at once. Refuses (SetLastError) what the CUDA runtime
// refuses.
void RunGrid(const void* kernel, dim3 grid, dim3 block, dim3 cluster, size_t shared_bytes,
             const std::function<void()>& body);

// The calling thread's place in the running grid.
struct ThreadContext {
  uint3 thread;
  uint3 block;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned char* shared;  // the block's dynamic shared memory
  int linear;             // thread index within the block
  int cluster_rank;       // the block's rank in its cluster
};
ThreadContext& Current();
void SyncCluster();
unsigned ClusterSize();
// The address in block `rank`'s shared memory (of this block's cluster)
// that `address` has in this block's.
void* MapSharedRank(void* address, unsigned rank);

void SyncThreads();
void SyncWarp();
// Lane values exchanged through the warp: every lane of the warp calls it.
uint64_t ExchangeLane(uint64_t bits, int source_lane);
uint32_t BallotLanes(bool predicate);

template <typename T>
T* DynamicShared() {
  return reinterpret_cast<T*>(Current().shared);
}

// kernel<<<grid, block, shared, stream>>>(args...) becomes
// Launch(kernel, grid, block, shared, stream)(args...), and for a kernel
// declared with __cluster_dims__(x, 1, 1), LaunchCluster(dim3(x, 1, 1),
// kernel, ...).
template <typename... P>
class Launcher {
 public:
  Launcher(void (*kernel)(P...), dim3 grid, dim3 block, dim3 cluster, size_t shared)
      : kernel_(kernel), grid_(grid), block_(block), cluster_(cluster), shared_(shared) {}
  template <typename... A>
  void operator()(A&&... args) const {
    std::tuple<std::decay_t<P>...> bound(std::forward<A>(args)...);
    void (*kernel)(P...) = kernel_;
    RunGrid(reinterpret_cast<const void*>(kernel), grid_, block_, cluster_, shared_,
            [kernel, &bound] { std::apply(kernel, bound); });
  }

 private:
  void (*kernel_)(P...);
  dim3 grid_, block_, cluster_;
  size_t shared_;
};

template <typename... P>
Launcher<P...> Launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared = 0,
                      cudaStream_t = nullptr) {
  return Launcher<P...>(kernel, grid, block, dim3(1, 1, 1), shared);
}
template <typename... P>
Launcher<P...> LaunchCluster(dim3 cluster, void (*kernel)(P...), dim3 grid, dim3 block,
                             size_t shared = 0, cudaStream_t = nullptr) {
  return Launcher<P...>(kernel, grid, block, cluster, shared);
}

}  // namespace performer::cuda_emulation

inline cudaError_t cudaGetLastError() { return performer::cuda_emulation::TakeLastError(); }
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
inline cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
template <typename T>
cudaError_t cudaFuncSetAttribute(T* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      value > performer::cuda_emulation::kOptinSharedBytes) {
    return cudaErrorInvalidValue;
  }
  performer::cuda_emulation::SetSharedLimit(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}
// Blocks of `threads` threads and `shared_bytes` dynamic shared memory one
// SM holds (2,048 threads and 228 KiB of shared memory an SM).
template <typename T>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, T*, int threads,
                                                          size_t shared_bytes) {
  if (threads < 1) return cudaErrorInvalidValue;
  int by_threads = 2048 / threads;
  int by_shared =
      shared_bytes == 0
          ? 32
          : static_cast<int>(performer::cuda_emulation::kSharedBytesPerSm / (shared_bytes + 1024));
  *blocks = std::min({by_threads, by_shared, 32});
  return cudaSuccess;
}

#define threadIdx (::performer::cuda_emulation::Current().thread)
#define blockIdx (::performer::cuda_emulation::Current().block)
#define blockDim (::performer::cuda_emulation::Current().block_dim)
#define gridDim (::performer::cuda_emulation::Current().grid_dim)

// ---- Device functions ------------------------------------------------------

inline void __syncthreads() { performer::cuda_emulation::SyncThreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { performer::cuda_emulation::SyncWarp(); }
[[noreturn]] void __trap();
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

namespace performer::cuda_emulation {
// `value` of lane `source` of the calling warp (every lane must call it).
template <typename T>
T ShuffleFrom(T value, int source) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = ExchangeLane(bits, source);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace performer::cuda_emulation

template <typename T>
T __shfl_xor_sync(unsigned, T value, int lane_mask, int = 32) {
  const int lane = performer::cuda_emulation::Current().linear % 32;
  return performer::cuda_emulation::ShuffleFrom(value, lane ^ lane_mask);
}
template <typename T>
T __shfl_sync(unsigned, T value, int source_lane, int = 32) {
  return performer::cuda_emulation::ShuffleFrom(value, source_lane % 32);
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  return performer::cuda_emulation::BallotLanes(predicate != 0);
}
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }

template <typename T>
T __ldg(const T* p) {
  return *p;
}
template <typename T>
T __ldcg(const T* p) {
  return *p;
}

inline float atomicAdd(float* address, float value) {
  auto* word = reinterpret_cast<uint32_t*>(address);
  uint32_t old = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    float current;
    std::memcpy(&current, &old, sizeof(float));
    const float sum = current + value;
    uint32_t desired;
    std::memcpy(&desired, &sum, sizeof(float));
    if (__atomic_compare_exchange_n(word, &old, desired, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED)) {
      return current;
    }
  }
}
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
}
inline int atomicAdd(int* address, int value) {
  return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
}

// Correctly rounded single operations (never contracted: the emulated
// sources are compiled with -ffp-contract=off).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float fmaf(float a, float b, float c) { return std::fma(a, b, c); }
inline float fmaxf(float a, float b) { return std::fmax(a, b); }
inline float expf(float x) { return std::exp(x); }
inline float erff(float x) { return std::erf(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}
inline int min(int a, int b) { return a < b ? a : b; }

#define CUDART_INF_F (__builtin_huge_valf())
#define CUDART_NAN_F (__builtin_nanf(""))

// ---- 16-bit floats ------------------------------------------------------------

struct __nv_bfloat16 {
  __nv_bfloat16() = default;
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t x = __float_as_uint(f);
  __nv_bfloat16 b;
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    b.bits = static_cast<uint16_t>((x >> 16) | 0x40);  // a quiet NaN
    return b;
  }
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even
  b.bits = static_cast<uint16_t>(x >> 16);
  return b;
}
inline float __bfloat162float(__nv_bfloat16 b) {
  return __uint_as_float(static_cast<uint32_t>(b.bits) << 16);
}

struct __half {
  __half() = default;
  uint16_t bits;
};
// IEEE binary16, round to nearest, ties to even (subnormals included).
inline __half __float2half_rn(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t magnitude = x & 0x7fffffffu;
  __half h;
  if (magnitude > 0x7f800000u) {
    h.bits = static_cast<uint16_t>(sign | 0x7e00u);  // a quiet NaN
    return h;
  }
  if (magnitude >= 0x477ff000u) {  // rounds past 65504: infinity
    h.bits = static_cast<uint16_t>(sign | 0x7c00u);
    return h;
  }
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    // The value in units of 2^-24, rounded to nearest even.
    const float units = __uint_as_float(magnitude) * 16777216.0f;
    h.bits = static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(units)));
    return h;
  }
  // Normal: rebias the exponent (127 -> 15) and round 13 mantissa bits off.
  uint32_t r = magnitude - 0x38000000u;
  r += 0x0fffu + ((r >> 13) & 1u);
  h.bits = static_cast<uint16_t>(sign | (r >> 13));
  return h;
}
inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu;
  const uint32_t mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24
    const float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}
