#include "kernels/cpu/skinny_linear_cpu.h"

#include <ATen/Parallel.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "kernels/cpu/simd.h"

namespace performer::kernels::cpu {
namespace {

constexpr int64_t kOutBlock = 4;  // weight rows per block (kept in L1)
constexpr int64_t kRowBlock = 3;  // x rows per micro-kernel call

struct LinearArgs {
  const float* x;
  const float* w;
  const float* bias;  // may be null
  float* y;
  int64_t rows;
  int64_t in;
  int64_t out;
};

// Rows of x per pass over a thread's weight blocks (a multiple of
// kRowBlock). A weight that fits in L2 is re-read per tile, so the tile
// fits in L1; a larger weight is streamed once per tile, so the tile is as
// large as half of L2 allows, and never below a decode step's batch (up to
// 64 rows: each weight row read once). The order of each output's sum is
// the same whatever the tiling.
int64_t RowTile(const LinearArgs& a) {
  constexpr int64_t kStepRows = 66;  // >= 64, a multiple of kRowBlock
  const int64_t row_bytes = std::max<int64_t>(1, a.in * static_cast<int64_t>(sizeof(float)));
  if (a.out * row_bytes <= (256 << 10)) {
    return std::max<int64_t>(kRowBlock, (16 << 10) / row_bytes / kRowBlock * kRowBlock);
  }
  return std::max<int64_t>(kStepRows, (128 << 10) / row_bytes / kRowBlock * kRowBlock);
}

// Portable micro-kernel: kRows x rows against `outs` (<= 4) weight rows with
// GCC vector extensions (16-byte vectors: SSE2, any x86-64 CPU).
template <int kRows>
PERFORMER_SIMD_INLINE void MicroPortable(const LinearArgs& a, int64_t r0, int64_t o0,
                                         int64_t outs) {
  using V = simd::VecOf<float, 16>::type;
  constexpr int64_t kLanes = simd::VecOf<float, 16>::kLanes;
  V acc[kRows][kOutBlock] = {};
  const int64_t k_vec = a.in / kLanes * kLanes;
  const float* w_rows[kOutBlock];
  for (int64_t o = 0; o < kOutBlock; ++o) w_rows[o] = a.w + (o0 + (o < outs ? o : 0)) * a.in;
  for (int64_t k = 0; k < k_vec; k += kLanes) {
    V w[kOutBlock];
#pragma GCC unroll 4
    for (int64_t o = 0; o < kOutBlock; ++o) simd::Load(&w[o], w_rows[o] + k);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      V xv;
      simd::Load(&xv, a.x + (r0 + r) * a.in + k);
#pragma GCC unroll 4
      for (int64_t o = 0; o < kOutBlock; ++o) acc[r][o] += xv * w[o];
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < outs; ++o) {
      float s = 0;
      for (int64_t l = 0; l < kLanes; ++l) s += acc[r][o][l];
      const float* xr = a.x + (r0 + r) * a.in;
      const float* wr = a.w + (o0 + o) * a.in;
      for (int64_t k = k_vec; k < a.in; ++k) s += xr[k] * wr[k];
      a.y[(r0 + r) * a.out + o0 + o] = s + (a.bias != nullptr ? a.bias[o0 + o] : 0.0f);
    }
  }
}

// Weight blocks [block_begin, block_end) against every row, tile by tile,
// with Micro::Run<R> (R rows at a time) as the micro-kernel.
template <typename Micro>
PERFORMER_SIMD_INLINE void TiledBlocks(const LinearArgs& a, int64_t block_begin,
                                       int64_t block_end) {
  const int64_t tile = RowTile(a);
  for (int64_t t0 = 0; t0 < a.rows; t0 += tile) {
    const int64_t t1 = std::min(a.rows, t0 + tile);
    for (int64_t b = block_begin; b < block_end; ++b) {
      const int64_t o0 = b * kOutBlock, outs = std::min(kOutBlock, a.out - o0);
      int64_t r = t0;
      for (; r + kRowBlock <= t1; r += kRowBlock) Micro::template Run<kRowBlock>(a, r, o0, outs);
      if (t1 - r == 2) {
        Micro::template Run<2>(a, r, o0, outs);
      } else if (t1 - r == 1) {
        Micro::template Run<1>(a, r, o0, outs);
      }
    }
  }
}

struct PortableMicro {
  template <int kRows>
  static PERFORMER_SIMD_INLINE void Run(const LinearArgs& a, int64_t r0, int64_t o0, int64_t outs) {
    MicroPortable<kRows>(a, r0, o0, outs);
  }
};

void BlocksPortable(const LinearArgs& a, int64_t block_begin, int64_t block_end) {
  TiledBlocks<PortableMicro>(a, block_begin, block_end);
}

#if PERFORMER_SIMD_HAVE_AVX2

// AVX2+FMA micro-kernel: kRows x rows against 4 weight rows (zero-padded
// pointers are never formed: missing weight rows reuse row 0 and are not
// stored).
template <int kRows>
PERFORMER_SIMD_TARGET_AVX2 inline void MicroAvx2(const LinearArgs& a, int64_t r0, int64_t o0,
                                                 int64_t outs) {
  __m256 acc[kRows][kOutBlock];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 4
    for (int o = 0; o < kOutBlock; ++o) acc[r][o] = _mm256_setzero_ps();
  }
  const float* w[kOutBlock];
  for (int64_t o = 0; o < kOutBlock; ++o) w[o] = a.w + (o0 + (o < outs ? o : 0)) * a.in;
  const int64_t k_vec = a.in / 8 * 8;
  for (int64_t k = 0; k < k_vec; k += 8) {
    const __m256 w0 = _mm256_loadu_ps(w[0] + k), w1 = _mm256_loadu_ps(w[1] + k);
    const __m256 w2 = _mm256_loadu_ps(w[2] + k), w3 = _mm256_loadu_ps(w[3] + k);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 xv = _mm256_loadu_ps(a.x + (r0 + r) * a.in + k);
      acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
      acc[r][2] = _mm256_fmadd_ps(xv, w2, acc[r][2]);
      acc[r][3] = _mm256_fmadd_ps(xv, w3, acc[r][3]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const float* xr = a.x + (r0 + r) * a.in;
    for (int64_t o = 0; o < outs; ++o) {
      float s = simd::HorizontalSum(acc[r][o]);
      for (int64_t k = k_vec; k < a.in; ++k) s += xr[k] * w[o][k];
      a.y[(r0 + r) * a.out + o0 + o] = s + (a.bias != nullptr ? a.bias[o0 + o] : 0.0f);
    }
  }
}

struct Avx2Micro {
  template <int kRows>
  PERFORMER_SIMD_TARGET_AVX2 static inline void Run(const LinearArgs& a, int64_t r0, int64_t o0,
                                                    int64_t outs) {
    MicroAvx2<kRows>(a, r0, o0, outs);
  }
};

PERFORMER_SIMD_TARGET_AVX2 void BlocksAvx2(const LinearArgs& a, int64_t block_begin,
                                           int64_t block_end) {
  TiledBlocks<Avx2Micro>(a, block_begin, block_end);
}
#endif

}  // namespace

torch::Tensor SkinnyLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                  const torch::Tensor& bias) {
  const int64_t rows = x.size(0), in = x.size(1), out = weight.size(0);
  torch::Tensor y = torch::empty({rows, out}, x.options());
  if (rows == 0 || out == 0) return y;
  LinearArgs args{x.data_ptr<float>(),
                  weight.data_ptr<float>(),
                  bias.defined() ? bias.data_ptr<float>() : nullptr,
                  y.data_ptr<float>(),
                  rows,
                  in,
                  out};
  const int64_t blocks = (out + kOutBlock - 1) / kOutBlock;
  at::parallel_for(0, blocks, SkinnyBlockGrain(in, rows), [&](int64_t begin, int64_t end) {
#if PERFORMER_SIMD_HAVE_AVX2
    if (simd::UseAvx2Fma()) {
      BlocksAvx2(args, begin, end);
      return;
    }
#endif
    BlocksPortable(args, begin, end);
  });
  return y;
}

}  // namespace performer::kernels::cpu
