#include "kernels/cpu/weight_dtype_linear_cpu.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/simd.h"
#include "kernels/cpu/skinny_linear_cpu.h"
#include "kernels/cpu/weight_formats.h"

// The AVX-512 functions are compiled wherever the AVX2 ones are (GCC/Clang on
// x86-64) and run only where CPUID says so.
#if PERFORMER_SIMD_HAVE_AVX2
#define PERFORMER_HAVE_AVX512 1
#define PERFORMER_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define PERFORMER_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma")))
#define PERFORMER_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#else
#define PERFORMER_HAVE_AVX512 0
#endif

namespace performer::kernels::cpu {
namespace {

constexpr int64_t kOutBlock = 4;  // weight rows per block (kept in L1)

struct LinearArgs {
  const float* x;
  const uint16_t* w_bf16;  // LinearBf16
  const int8_t* w_int8;    // LinearInt8
  const float* scales;     // LinearInt8: (out, blocks)
  const float* bias;       // may be null
  float* y;
  int64_t rows;
  int64_t in;
  int64_t out;
  int64_t blocks;  // Int8BlocksPerRow(in)
  // Activations prepared once per call by the AVX-512 paths.
  const uint16_t* x_bf16;  // (rows, in): x rounded to bf16
  const int8_t* x_s8;      // (rows, 64 * pairs): x quantized per block
  const int32_t* x_corr;   // (rows, pairs, 16): -128 x the sum of each lane's 4 x bytes
  const float* x_scale;    // (rows, pairs, 16): [d(2p) x 8, d(2p + 1) x 8]
  int64_t pairs;           // blocks of 32 columns taken two at a time
};

float BiasOf(const LinearArgs& a, int64_t o) { return a.bias != nullptr ? a.bias[o] : 0.0f; }

// ---------------------------------------------------------------- scalar

void ScalarBf16(const LinearArgs& a, int64_t block_begin, int64_t block_end) {
  const int64_t o_end = std::min(a.out, block_end * kOutBlock);
  for (int64_t o = block_begin * kOutBlock; o < o_end; ++o) {
    const uint16_t* w = a.w_bf16 + o * a.in;
    for (int64_t r = 0; r < a.rows; ++r) {
      const float* x = a.x + r * a.in;
      float s = 0.0f;
      for (int64_t i = 0; i < a.in; ++i) s += x[i] * Bf16ToFloat(w[i]);
      a.y[r * a.out + o] = s + BiasOf(a, o);
    }
  }
}

void ScalarInt8(const LinearArgs& a, int64_t block_begin, int64_t block_end) {
  const int64_t o_end = std::min(a.out, block_end * kOutBlock);
  for (int64_t o = block_begin * kOutBlock; o < o_end; ++o) {
    const int8_t* w = a.w_int8 + o * a.in;
    const float* scales = a.scales + o * a.blocks;
    for (int64_t r = 0; r < a.rows; ++r) {
      const float* x = a.x + r * a.in;
      float s = 0.0f;
      for (int64_t i = 0; i < a.in; ++i) {
        s += x[i] * (static_cast<float>(w[i]) * scales[i / kInt8BlockSize]);
      }
      a.y[r * a.out + o] = s + BiasOf(a, o);
    }
  }
}

#if PERFORMER_SIMD_HAVE_AVX2
// ---------------------------------------------------------------- AVX2

// The 4 weight rows of a block, read 8 columns at a time as float32 (Load8,
// k a multiple of 8) or one column at a time (Load1, the tail's columns);
// both give exactly the scalar path's weight values. Rows past `out` repeat
// the block's first row (their results are not stored).
struct Bf16Block {
  const uint16_t* rows[kOutBlock];
  PERFORMER_SIMD_TARGET_AVX2 inline __m256 Load8(int j, int64_t k) const {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[j] + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  float Load1(int j, int64_t k) const { return Bf16ToFloat(rows[j][k]); }
};

// 8 columns starting at a multiple of 8 lie in one block of 32: one scale.
struct Int8Block {
  const int8_t* rows[kOutBlock];
  const float* scales[kOutBlock];
  PERFORMER_SIMD_TARGET_AVX2 inline __m256 Load8(int j, int64_t k) const {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows[j] + k));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)),
                         _mm256_set1_ps(scales[j][k / kInt8BlockSize]));
  }
  float Load1(int j, int64_t k) const {
    return static_cast<float>(rows[j][k]) * scales[j][k / kInt8BlockSize];
  }
};

// A block already widened into a float32 buffer.
struct FloatBlock {
  const float* rows[kOutBlock];
  PERFORMER_SIMD_TARGET_AVX2 inline __m256 Load8(int j, int64_t k) const {
    return _mm256_loadu_ps(rows[j] + k);
  }
  float Load1(int j, int64_t k) const { return rows[j][k]; }
};

Bf16Block BlockOf(const LinearArgs& a, int64_t o0, int64_t outs, const uint16_t*) {
  Bf16Block block;
  for (int j = 0; j < kOutBlock; ++j) block.rows[j] = a.w_bf16 + (o0 + (j < outs ? j : 0)) * a.in;
  return block;
}

Int8Block BlockOf(const LinearArgs& a, int64_t o0, int64_t outs, const int8_t*) {
  Int8Block block;
  for (int j = 0; j < kOutBlock; ++j) {
    const int64_t o = o0 + (j < outs ? j : 0);
    block.rows[j] = a.w_int8 + o * a.in;
    block.scales[j] = a.scales + o * a.blocks;
  }
  return block;
}

// kRows rows of x against the 4 weight rows of `w`: 12 accumulators and 4
// weight vectors fill the 16 ymm registers at kRows = 3. Every Block type
// gives the same sums in the same order.
template <int kRows, typename Block>
PERFORMER_SIMD_TARGET_AVX2 inline void MicroAvx2(const LinearArgs& a, const Block& w, int64_t r0,
                                                 int64_t o0, int64_t outs) {
  __m256 acc[kRows][kOutBlock];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < kOutBlock; ++j) acc[r][j] = _mm256_setzero_ps();
  }
  const int64_t k_vec = a.in / 8 * 8;
  for (int64_t k = 0; k < k_vec; k += 8) {
    const __m256 w0 = w.Load8(0, k), w1 = w.Load8(1, k), w2 = w.Load8(2, k), w3 = w.Load8(3, k);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 xv = _mm256_loadu_ps(a.x + (r0 + r) * a.in + k);
      acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(xv, w2, acc[r][2]);
      acc[r][3] = _mm256_fmadd_ps(xv, w3, acc[r][3]);
    }
  }
  // Reduced with constant indices first: indexing acc with the run-time
  // `outs` would keep it in memory, and GCC then stores it on every
  // iteration of the loop above.
  float sums[kRows][kOutBlock];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < kOutBlock; ++j) sums[r][j] = simd::HorizontalSum(acc[r][j]);
  }
  for (int r = 0; r < kRows; ++r) {
    const float* xr = a.x + (r0 + r) * a.in;
    for (int j = 0; j < outs; ++j) {
      float s = sums[r][j];
      for (int64_t k = k_vec; k < a.in; ++k) s += xr[k] * w.Load1(j, k);
      a.y[(r0 + r) * a.out + o0 + j] = s + BiasOf(a, o0 + j);
    }
  }
}

template <typename Block>
PERFORMER_SIMD_TARGET_AVX2 void RowsAvx2(const LinearArgs& a, const Block& w, int64_t o0,
                                         int64_t outs) {
  constexpr int kRowBlock = 3;
  int64_t r = 0;
  for (; r + kRowBlock <= a.rows; r += kRowBlock) MicroAvx2<kRowBlock>(a, w, r, o0, outs);
  if (a.rows - r == 2) {
    MicroAvx2<2>(a, w, r, o0, outs);
  } else if (a.rows - r == 1) {
    MicroAvx2<1>(a, w, r, o0, outs);
  }
}

// Up to 3 rows (one micro-kernel call per block) widen the weights in
// registers. Beyond, each block is widened once into a buffer and every row
// runs over float32 weights: widening costs about as much as the FMAs it
// feeds, and in registers it would be repeated for every 3 rows (at 16 to 64
// rows this is 1.15-1.4x faster, on par with the fp32 kernel). The sums are
// the same either way, so a row's result does not depend on how many rows
// came with it. The buffer's rows are padded so that they do not start at
// the same offset modulo 4 KiB (which aliases loads with the stores before
// them).
template <typename T>
PERFORMER_SIMD_TARGET_AVX2 void BlocksAvx2(const LinearArgs& a, int64_t block_begin,
                                           int64_t block_end) {
  constexpr int64_t kDirectRows = 3;
  const int64_t stride = a.in + 16;
  std::unique_ptr<float[]> widened;
  if (a.rows > kDirectRows) widened.reset(new float[kOutBlock * stride]);
  const int64_t k_vec = a.in / 8 * 8;
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t o0 = b * kOutBlock, outs = std::min(kOutBlock, a.out - o0);
    const auto w = BlockOf(a, o0, outs, static_cast<const T*>(nullptr));
    if (a.rows <= kDirectRows) {
      RowsAvx2(a, w, o0, outs);
      continue;
    }
    FloatBlock f;
    for (int j = 0; j < kOutBlock; ++j) {
      float* dst = widened.get() + j * stride;
      for (int64_t k = 0; k < k_vec; k += 8) _mm256_storeu_ps(dst + k, w.Load8(j, k));
      for (int64_t k = k_vec; k < a.in; ++k) dst[k] = w.Load1(j, k);
      f.rows[j] = dst;
    }
    RowsAvx2(a, f, o0, outs);
  }
}
#endif  // PERFORMER_SIMD_HAVE_AVX2

#if PERFORMER_HAVE_AVX512
// GCC 12's AVX-512 intrinsics start some results from _mm*_undefined_*()
// (a self-initialised variable), which -W(maybe-)uninitialized reports once
// inlined (GCC bug 105593); those lanes are always overwritten.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// ---------------------------------------------------------------- AVX-512

// The sums of 4 accumulators, in one vector: halves, then quarters, folded
// across the four at once (14 instructions where 4 _mm512_reduce_add_ps take
// about 30: with `in` a few hundred columns, the reductions are a sizeable
// part of a micro-kernel call).
PERFORMER_TARGET_AVX512 inline __m128 Sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // [a0 + a2, a1 + a3, b0 + b2, b1 + b3] in 128-bit lanes; the same for c, d.
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  // One 128-bit lane for each of a, b, c, d, then summed within the lane.
  __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(2, 3, 0, 1)));
  s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), s));
}

// y = the sums of the accumulators + bias. The sums go through memory with
// constant indices: indexing acc with the run-time `outs` would keep acc in
// memory, and GCC then stores it on every iteration of the micro-kernel.
template <int kRows>
PERFORMER_TARGET_AVX512 inline void StoreRows(const LinearArgs& a,
                                              const __m512 (&acc)[kRows][kOutBlock], int64_t r0,
                                              int64_t o0, int64_t outs) {
  float sums[kRows][kOutBlock];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    _mm_storeu_ps(sums[r], Sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
  }
  for (int r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < outs; ++j) {
      a.y[(r0 + r) * a.out + o0 + j] = sums[r][j] + BiasOf(a, o0 + j);
    }
  }
}

// ---------------------------------------------------------------- AVX-512 bf16
//
// vdpbf16ps: x rounded to bf16 once per call, then 32 products of bf16 pairs
// per instruction. Measured against widening the weights to float32 and
// vfmadd231ps (in registers, or through a buffer as the AVX2 path does):
// as fast at 1 row (both stream the same weight bytes), 1.15-1.35x faster at
// 8 to 64 rows with in = 2048, within 10% either way with in = 512: the
// products take fewer instructions, and x, re-read for every block of
// weights, is half the bytes.

// vcvtne2ps2bf16 rounds to nearest even; the last group of a row is masked
// (zeros past `in`).
PERFORMER_TARGET_AVX512_BF16 void PrepareBf16Rows(const LinearArgs& a, int64_t row_begin,
                                                  int64_t row_end, uint16_t* x_bf16) {
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* x = a.x + r * a.in;
    uint16_t* dst = x_bf16 + r * a.in;
    for (int64_t k = 0; k < a.in; k += 32) {
      const int64_t n = std::min<int64_t>(a.in - k, 32);
      const __mmask16 lo = static_cast<__mmask16>((1u << std::min<int64_t>(n, 16)) - 1);
      const __mmask16 hi = static_cast<__mmask16>((1u << std::max<int64_t>(n - 16, 0)) - 1);
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, x + k + 16),
                                             _mm512_maskz_loadu_ps(lo, x + k));
      const __mmask32 m = static_cast<__mmask32>((1ull << n) - 1);
      _mm512_mask_storeu_epi16(dst + k, m, reinterpret_cast<const __m512i&>(v));
    }
  }
}

// kRows rows of x against 4 weight rows: 24 accumulators at kRows = 6, with
// the 4 weight vectors and one of x, in the 32 zmm registers.
template <int kRows>
PERFORMER_TARGET_AVX512_BF16 inline void MicroAvx512Bf16(const LinearArgs& a, int64_t r0,
                                                         int64_t o0, int64_t outs) {
  __m512 acc[kRows][kOutBlock];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < kOutBlock; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  const uint16_t* w[kOutBlock];
  for (int j = 0; j < kOutBlock; ++j) w[j] = a.w_bf16 + (o0 + (j < outs ? j : 0)) * a.in;
  const uint16_t* x = a.x_bf16 + r0 * a.in;
  const int64_t k_vec = a.in / 32 * 32;
  for (int64_t k = 0; k < k_vec; k += 32) {
    __m512bh wv[kOutBlock];
#pragma GCC unroll 4
    for (int j = 0; j < kOutBlock; ++j) wv[j] = (__m512bh)_mm512_loadu_si512(w[j] + k);
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + r * a.in + k);
#pragma GCC unroll 4
      for (int j = 0; j < kOutBlock; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
    }
  }
  if (k_vec < a.in) {
    const __mmask32 m = static_cast<__mmask32>((1ull << (a.in - k_vec)) - 1);
    __m512bh wv[kOutBlock];
#pragma GCC unroll 4
    for (int j = 0; j < kOutBlock; ++j) {
      wv[j] = (__m512bh)_mm512_maskz_loadu_epi16(m, w[j] + k_vec);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(m, x + r * a.in + k_vec);
#pragma GCC unroll 4
      for (int j = 0; j < kOutBlock; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv, wv[j]);
    }
  }
  StoreRows<kRows>(a, acc, r0, o0, outs);
}

PERFORMER_TARGET_AVX512_BF16 void BlocksAvx512Bf16(const LinearArgs& a, int64_t block_begin,
                                                   int64_t block_end) {
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t o0 = b * kOutBlock, outs = std::min(kOutBlock, a.out - o0);
    int64_t r = 0;
    for (; r + 6 <= a.rows; r += 6) MicroAvx512Bf16<6>(a, r, o0, outs);
    switch (a.rows - r) {
      case 5:
        MicroAvx512Bf16<5>(a, r, o0, outs);
        break;
      case 4:
        MicroAvx512Bf16<4>(a, r, o0, outs);
        break;
      case 3:
        MicroAvx512Bf16<3>(a, r, o0, outs);
        break;
      case 2:
        MicroAvx512Bf16<2>(a, r, o0, outs);
        break;
      case 1:
        MicroAvx512Bf16<1>(a, r, o0, outs);
        break;
      default:
        break;
    }
  }
}

// ---------------------------------------------------------------- AVX-512 int8
//
// vpdpbusd: each row of x is quantized per block of 32 columns like the
// weights (llama.cpp's Q8_0 x Q8_0), the products of a block are summed
// exactly in int32, and the block's two scales are applied in float32.
// Measured against dequantizing the weights in registers (vpmovsxbd,
// vcvtdq2ps, one multiply by the block scale) and vfmadd231ps: 1.6-2.7x
// faster at 1 row, 1.3-1.8x at 8 to 64 rows.
//
// vpdpbusd multiplies unsigned bytes by signed bytes. The weights are made
// unsigned as they are loaded, w + 128 (one xor with 0x80; w + 128 is in
// [1, 255]), and x stays signed; a block's sum is then w . x + 128 sum(x),
// and the accumulator starts at -128 sum(x), made once per row of x when x
// is quantized (a row's correction, shared by every weight row). One zmm
// holds two blocks (64 columns): the int32 lanes 0-7 sum block 2p and lanes
// 8-15 block 2p + 1, and the scales are laid out to match.

// x quantized with scale max |x| / 127 per block, rounded to nearest even
// (vcvtps2dq); past `in` x is 0 (against masked weights, 128 once made
// unsigned). Then each pair's correction.
PERFORMER_TARGET_AVX512_VNNI void PrepareInt8Rows(const LinearArgs& a, int64_t row_begin,
                                                  int64_t row_end, int8_t* x_s8, int32_t* x_corr,
                                                  float* x_scale) {
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* x = a.x + r * a.in;
    int8_t* q = x_s8 + r * 64 * a.pairs;
    float* d = x_scale + r * 16 * a.pairs;
    for (int64_t b = 0; b < 2 * a.pairs; ++b) {
      const int64_t k = b * kInt8BlockSize;
      const int64_t n = std::clamp<int64_t>(a.in - k, 0, kInt8BlockSize);
      const __mmask16 lo = static_cast<__mmask16>((1u << std::min<int64_t>(n, 16)) - 1);
      const __mmask16 hi = static_cast<__mmask16>((1u << std::max<int64_t>(n - 16, 0)) - 1);
      const __m512 v0 = _mm512_maskz_loadu_ps(lo, x + k);
      const __m512 v1 = _mm512_maskz_loadu_ps(hi, x + k + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float scale = amax / 127.0f;
      const __m512 inv = _mm512_set1_ps(scale == 0.0f ? 0.0f : 127.0f / amax);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
      // vpmovsdb saturates to [-128, 127]; x * inv is within rounding of
      // [-127, 127], so it never needs to.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k + 16), _mm512_cvtsepi32_epi8(q1));
      std::fill_n(d + 8 * b, 8, scale);
    }
    for (int64_t p = 0; p < a.pairs; ++p) {
      const __m512i xv = _mm512_loadu_si512(q + p * 64);
      _mm512_storeu_si512(
          x_corr + (r * a.pairs + p) * 16,
          _mm512_sub_epi32(_mm512_setzero_si512(),
                           _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, xv)));
    }
  }
}

// The per-weight-row vectors of pair p (64 columns) that every row of x
// reuses: the weights made unsigned (w + 128) and the two blocks' scales laid
// out as the lanes sum them.
struct Int8WeightPair {
  __m512i w;
  __m512 scale;
};

PERFORMER_TARGET_AVX512_VNNI inline Int8WeightPair LoadInt8WeightPair(const LinearArgs& a,
                                                                      int64_t o, int64_t p) {
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i halves = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const int64_t k = p * 64;
  const __mmask64 m = a.in - k >= 64 ? ~0ull : (1ull << (a.in - k)) - 1;
  const __mmask16 ms = 2 * p + 1 < a.blocks ? 0x3 : 0x1;
  Int8WeightPair pair;
  pair.w = _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, a.w_int8 + o * a.in + k), offset);
  pair.scale =
      _mm512_permutexvar_ps(halves, _mm512_maskz_loadu_ps(ms, a.scales + o * a.blocks + 2 * p));
  return pair;
}

// kRows rows of x against 4 weight rows: per weight row the weights and
// their scales stay in registers (8), with 12 accumulators at kRows = 3. `pairs` (kOutBlock per
// pair, null: made here) holds the weight vectors when several tiles of rows reuse them.
template <int kRows>
PERFORMER_TARGET_AVX512_VNNI inline void MicroAvx512Int8(const LinearArgs& a, int64_t r0,
                                                         int64_t o0, int64_t outs,
                                                         const Int8WeightPair* pairs) {
  __m512 acc[kRows][kOutBlock];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < kOutBlock; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  int64_t rows_o[kOutBlock];
  for (int j = 0; j < kOutBlock; ++j) rows_o[j] = o0 + (j < outs ? j : 0);
  for (int64_t p = 0; p < a.pairs; ++p) {
    Int8WeightPair wp[kOutBlock];
#pragma GCC unroll 4
    for (int j = 0; j < kOutBlock; ++j) {
      if (pairs == nullptr) {
        // Streaming from memory: ask for the row's bytes 8 vectors ahead.
        _mm_prefetch(
            reinterpret_cast<const char*>(a.w_int8 + (rows_o[j] + 2 * kOutBlock) * a.in + p * 64),
            _MM_HINT_T0);
      }
      wp[j] = pairs != nullptr ? pairs[p * kOutBlock + j] : LoadInt8WeightPair(a, rows_o[j], p);
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      const __m512i xv = _mm512_loadu_si512(a.x_s8 + ((r0 + r) * a.pairs + p) * 64);
      const __m512i corr = _mm512_loadu_si512(a.x_corr + ((r0 + r) * a.pairs + p) * 16);
      const __m512 dx = _mm512_loadu_ps(a.x_scale + ((r0 + r) * a.pairs + p) * 16);
#pragma GCC unroll 4
      for (int j = 0; j < kOutBlock; ++j) {
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, wp[j].w, xv));
        acc[r][j] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dx, wp[j].scale), acc[r][j]);
      }
    }
  }
  StoreRows<kRows>(a, acc, r0, o0, outs);
}

PERFORMER_TARGET_AVX512_VNNI void BlocksAvx512Int8(const LinearArgs& a, int64_t block_begin,
                                                   int64_t block_end) {
  // More than one tile of rows: each block's weight vectors are made once
  // (in L1: kOutBlock x pairs x 192 bytes) instead of once per tile.
  // new[] of the over-aligned struct (C++17 aligned new); a std::vector
  // would drop the vector types' alignment from its template argument.
  std::unique_ptr<Int8WeightPair[]> cache;
  if (a.rows > 3) cache.reset(new Int8WeightPair[static_cast<size_t>(a.pairs * kOutBlock)]);
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t o0 = b * kOutBlock, outs = std::min(kOutBlock, a.out - o0);
    const Int8WeightPair* pairs = nullptr;
    if (cache != nullptr) {
      for (int64_t p = 0; p < a.pairs; ++p) {
        for (int64_t j = 0; j < kOutBlock; ++j) {
          cache[p * kOutBlock + j] = LoadInt8WeightPair(a, o0 + (j < outs ? j : 0), p);
        }
      }
      pairs = cache.get();
    }
    int64_t r = 0;
    for (; r + 3 <= a.rows; r += 3) MicroAvx512Int8<3>(a, r, o0, outs, pairs);
    if (a.rows - r == 2) {
      MicroAvx512Int8<2>(a, r, o0, outs, pairs);
    } else if (a.rows - r == 1) {
      MicroAvx512Int8<1>(a, r, o0, outs, pairs);
    }
  }
}

#pragma GCC diagnostic pop
#endif  // PERFORMER_HAVE_AVX512

// ---------------------------------------------------------------- dispatch

struct CpuFeatures {
  bool avx2 = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
};

const CpuFeatures& Features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if PERFORMER_SIMD_HAVE_AVX2
    f.avx2 = simd::CpuHasAvx2Fma();
    const bool avx512 = f.avx2 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    f.avx512_bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
    f.avx512_vnni = avx512 && __builtin_cpu_supports("avx512vnni");
#endif
    return f;
  }();
  return features;
}

LinearPath Resolve(LinearWeights weights, LinearPath path, const char* op) {
  if (path == LinearPath::kAuto) return ChosenLinearPath(weights);
  TORCH_CHECK(LinearPathAvailable(weights, path), op, ": this CPU has no ", LinearPathName(path),
              " path for ", weights == LinearWeights::kBf16 ? "bf16" : "int8", " weights");
  return path;
}

int64_t GrainInRows(int64_t in) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in)); }

LinearArgs MakeArgs(const float* x, const float* bias, float* y, int64_t rows, int64_t in,
                    int64_t out) {
  LinearArgs args{};
  args.x = x;
  args.bias = bias;
  args.y = y;
  args.rows = rows;
  args.in = in;
  args.out = out;
  return args;
}

// The block function of `path` for weights of type T (uint16_t: bf16,
// int8_t: int8).
using BlocksFn = void (*)(const LinearArgs&, int64_t, int64_t);
template <typename T>
BlocksFn BlocksFor(LinearPath path) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
#if PERFORMER_HAVE_AVX512
  if (path == LinearPath::kAvx512) return kBf16 ? &BlocksAvx512Bf16 : &BlocksAvx512Int8;
#endif
#if PERFORMER_SIMD_HAVE_AVX2
  if (path == LinearPath::kAvx2) return &BlocksAvx2<T>;
#endif
  return kBf16 ? &ScalarBf16 : &ScalarInt8;
}

// Every block of 4 weight rows through `blocks`, split over threads.
void RunBlocks(const LinearArgs& args, BlocksFn blocks) {
  const int64_t count = (args.out + kOutBlock - 1) / kOutBlock;
  at::parallel_for(0, count, SkinnyBlockGrain(args.in),
                   [&](int64_t begin, int64_t end) { blocks(args, begin, end); });
}

}  // namespace

const char* LinearPathName(LinearPath path) {
  switch (path) {
    case LinearPath::kAuto:
      return "auto";
    case LinearPath::kScalar:
      return "scalar";
    case LinearPath::kAvx2:
      return "avx2";
    case LinearPath::kAvx512:
      return "avx512";
  }
  return "unknown";
}

bool LinearPathAvailable(LinearWeights weights, LinearPath path) {
  switch (path) {
    case LinearPath::kAuto:
    case LinearPath::kScalar:
      return true;
    case LinearPath::kAvx2:
      return Features().avx2;
    case LinearPath::kAvx512:
      return weights == LinearWeights::kBf16 ? Features().avx512_bf16 : Features().avx512_vnni;
  }
  return false;
}

LinearPath ChosenLinearPath(LinearWeights weights) {
  for (LinearPath path : {LinearPath::kAvx512, LinearPath::kAvx2}) {
    if (LinearPathAvailable(weights, path)) return path;
  }
  return LinearPath::kScalar;
}

void LinearBf16(const float* x, const uint16_t* weight, const float* bias, float* y, int64_t rows,
                int64_t in, int64_t out, LinearPath path) {
  path = Resolve(LinearWeights::kBf16, path, "LinearBf16");
  if (rows <= 0 || out <= 0) return;
  LinearArgs args = MakeArgs(x, bias, y, rows, in, out);
  args.w_bf16 = weight;
  std::unique_ptr<uint16_t[]> x_bf16;
#if PERFORMER_HAVE_AVX512
  if (path == LinearPath::kAvx512) {
    x_bf16.reset(new uint16_t[rows * in]);
    at::parallel_for(0, rows, GrainInRows(in), [&](int64_t begin, int64_t end) {
      PrepareBf16Rows(args, begin, end, x_bf16.get());
    });
    args.x_bf16 = x_bf16.get();
  }
#endif
  RunBlocks(args, BlocksFor<uint16_t>(path));
}

void LinearInt8(const float* x, const int8_t* weight, const float* scales, const float* bias,
                float* y, int64_t rows, int64_t in, int64_t out, LinearPath path) {
  path = Resolve(LinearWeights::kInt8, path, "LinearInt8");
  if (rows <= 0 || out <= 0) return;
  LinearArgs args = MakeArgs(x, bias, y, rows, in, out);
  args.w_int8 = weight;
  args.scales = scales;
  args.blocks = Int8BlocksPerRow(in);
  std::unique_ptr<int8_t[]> x_s8;
  std::unique_ptr<int32_t[]> x_corr;
  std::unique_ptr<float[]> x_scale;
#if PERFORMER_HAVE_AVX512
  if (path == LinearPath::kAvx512) {
    args.pairs = (args.blocks + 1) / 2;
    x_s8.reset(new int8_t[rows * 64 * args.pairs]);
    x_corr.reset(new int32_t[rows * 16 * args.pairs]);
    x_scale.reset(new float[rows * 16 * args.pairs]);
    at::parallel_for(0, rows, GrainInRows(in), [&](int64_t begin, int64_t end) {
      PrepareInt8Rows(args, begin, end, x_s8.get(), x_corr.get(), x_scale.get());
    });
    args.x_s8 = x_s8.get();
    args.x_corr = x_corr.get();
    args.x_scale = x_scale.get();
  }
#endif
  RunBlocks(args, BlocksFor<int8_t>(path));
}

}  // namespace performer::kernels::cpu
