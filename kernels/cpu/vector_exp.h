// exp over the 8 lanes of an AVX vector, for the CPU kernels' softmax
// (kernels/cpu/softmax_weighted_sum.h).
//
// Cephes' single-precision exp: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in
// two parts, so that r is exact), exp(r) by a degree-7 polynomial, times 2^n
// built in the exponent bits. Within 2 ulp of the true value from -87.3 to
// 88 (tests/kernels/cpu/vector_exp_test.cc). x is clamped to [-87.5, 88], so
// that n stays in [-126, 127]: below, the result is exp(-87.5) (about 1e-38)
// instead of a smaller denormal or 0; above, exp(88) (about 1.65e38) instead
// of up to infinity. NaN stays NaN. Each lane is the same chain of
// operations, whatever the other lanes.
#pragma once

#include "kernels/cpu/simd.h"

#if PERFORMER_SIMD_HAVE_AVX2
namespace performer::kernels::cpu::simd {

PERFORMER_SIMD_TARGET_AVX2 PERFORMER_SIMD_INLINE __m256 ExpAvx2(__m256 x) {
  // The bound first: MAXPS and MINPS return their second operand when one is
  // NaN.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.5f), x));
  // n = round(x / ln 2), by floor(x log2(e) + 0.5).
  const __m256 n = _mm256_floor_ps(
      _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  // r = x - n ln 2, ln 2 = 0.693359375 - 2.12194440e-4 (the first part exact
  // in 9 bits, so n times it is exact).
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  // exp(r) = 1 + r + r^2 p(r).
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n: the biased exponent n + 127 in bits 23-30.
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

}  // namespace performer::kernels::cpu::simd
#endif
