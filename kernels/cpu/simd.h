// Small SIMD building blocks for the CPU kernels.
//
// The project is compiled for the baseline x86-64 ISA (SSE2) so that one
// binary runs everywhere. The hot loops are therefore written once, as
// always-inline templates over a GCC/Clang vector-extension type, and
// instantiated twice by each kernel: once with 16-byte vectors (any CPU) and
// once inside a function compiled for AVX2+FMA with 32-byte vectors, chosen at
// run time with UseAvx2Fma(). Writing the vectors explicitly (rather than
// relying on auto-vectorisation) keeps the speed independent of -O level and
// of the floating-point reassociation rules (dot products would otherwise stay
// scalar without -ffast-math).
//
//   VecOf<T, kBytes>::type   kBytes / sizeof(T) lanes of T
//   Load(&v, p) / Store(p, v) unaligned; they also work with V = T (one lane),
//                             which the kernels use for the tail columns.
//   PERFORMER_SIMD_TARGET_AVX2 attribute for the AVX2+FMA instantiations;
//                             PERFORMER_SIMD_HAVE_AVX2 is 1 when it is usable.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define PERFORMER_SIMD_HAVE_AVX2 1
#define PERFORMER_SIMD_TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define PERFORMER_SIMD_HAVE_AVX2 0
#define PERFORMER_SIMD_TARGET_AVX2
#endif

#define PERFORMER_SIMD_INLINE inline __attribute__((always_inline))

namespace performer::kernels::cpu::simd {

template <typename T, int kBytes>
struct VecOf {
  typedef T type __attribute__((vector_size(kBytes)));
  static constexpr int64_t kLanes = kBytes / static_cast<int64_t>(sizeof(T));
};

// Loads and stores go through memcpy: the rows the kernels address are only
// aligned to sizeof(T), and memcpy compiles to one unaligned move.
template <typename V, typename T>
PERFORMER_SIMD_INLINE void Load(V* v, const T* p) {
  std::memcpy(v, p, sizeof(V));
}

template <typename V, typename T>
PERFORMER_SIMD_INLINE void Store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// sum_i x[i] * y[i] for n elements, with kBytes-wide vector accumulators.
template <typename T, int kBytes>
PERFORMER_SIMD_INLINE T Dot(const T* x, const T* y, int64_t n) {
  using V = typename VecOf<T, kBytes>::type;
  constexpr int64_t kLanes = VecOf<T, kBytes>::kLanes;
  V acc0 = {};
  V acc1 = {};
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    V x0, y0, x1, y1;
    Load(&x0, x + i);
    Load(&y0, y + i);
    Load(&x1, x + i + kLanes);
    Load(&y1, y + i + kLanes);
    acc0 += x0 * y0;
    acc1 += x1 * y1;
  }
  for (; i + kLanes <= n; i += kLanes) {
    V x0, y0;
    Load(&x0, x + i);
    Load(&y0, y + i);
    acc0 += x0 * y0;
  }
  acc0 += acc1;
  T sum = 0;
  for (int64_t lane = 0; lane < kLanes; ++lane) sum += acc0[lane];
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

// y[i] += alpha * x[i] for n elements.
template <typename T, int kBytes>
PERFORMER_SIMD_INLINE void Axpy(T alpha, const T* x, T* y, int64_t n) {
  using V = typename VecOf<T, kBytes>::type;
  constexpr int64_t kLanes = VecOf<T, kBytes>::kLanes;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    V xv, yv;
    Load(&xv, x + i);
    Load(&yv, y + i);
    yv += alpha * xv;
    Store(y + i, yv);
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

#if PERFORMER_SIMD_HAVE_AVX2
// The sum of an AVX vector's 8 lanes.
PERFORMER_SIMD_TARGET_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
#endif

// Whether the CPU executes AVX2 and FMA (CPUID, read once); false where
// PERFORMER_SIMD_HAVE_AVX2 is 0.
inline bool CpuHasAvx2Fma() {
#if PERFORMER_SIMD_HAVE_AVX2
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
#else
  return false;
#endif
}

// Set by tests to run the portable instantiations on machines with AVX2, so
// that both are covered.
inline std::atomic<bool>& ForcePortableForTesting() {
  static std::atomic<bool> force{false};
  return force;
}

// True when the AVX2+FMA instantiations should run: the CPU executes AVX2 and
// FMA (always false where PERFORMER_SIMD_HAVE_AVX2 is 0) and no test forces
// the portable path.
inline bool UseAvx2Fma() {
  return CpuHasAvx2Fma() && !ForcePortableForTesting().load(std::memory_order_relaxed);
}

}  // namespace performer::kernels::cpu::simd
