// nvcuda::wmma on the host (tests/kernels/cuda/emulation/cuda_emulation.h):
// every lane of a warp holds the whole tile of a fragment (row-major
// element order), so elementwise work on fragment elements applies to the
// whole tile in each lane, and a product is the float32 sum over k in
// order. Stores are made by lane 0, then the warp meets at a barrier.
#pragma once

#include "tests/kernels/cuda/emulation/cuda_emulation.h"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline float Widen(float x) { return x; }
inline float Widen(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float Widen(__half x) { return __half2float(x); }
}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kCols = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = kRows * kCols;
  T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, float value) {
  for (int i = 0; i < f.num_elements; ++i) {
    if constexpr (std::is_same_v<T, float>) {
      f.x[i] = value;
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f.x[i] = __float2bfloat16_rn(value);
    } else {
      f.x[i] = __float2half_rn(value);
    }
  }
}

// matrix_a / matrix_b: the layout is the fragment's.
template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ld) {
  using F = fragment<Use, M, N, K, T, Layout>;
  constexpr bool kColumnMajor = std::is_same_v<Layout, col_major>;
  for (int r = 0; r < F::kRows; ++r) {
    for (int c = 0; c < F::kCols; ++c) {
      f.x[r * F::kCols + c] =
          kColumnMajor ? p[static_cast<size_t>(c) * ld + r] : p[static_cast<size_t>(r) * ld + c];
    }
  }
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ld,
                      layout_t layout) {
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) {
      f.x[r * N + c] = layout == mem_col_major ? p[static_cast<size_t>(c) * ld + r]
                                               : p[static_cast<size_t>(r) * ld + c];
    }
  }
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ld,
                       layout_t layout) {
  if (::performer::cuda_emulation::Current().linear % 32 == 0) {
    for (int r = 0; r < M; ++r) {
      for (int c = 0; c < N; ++c) {
        float& out = layout == mem_col_major ? p[static_cast<size_t>(c) * ld + r]
                                             : p[static_cast<size_t>(r) * ld + c];
        out = f.x[r * N + c];
      }
    }
  }
  __syncwarp();
}

template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, M, N, K, float>& d,
              const fragment<matrix_a, M, N, K, T, LayoutA>& a,
              const fragment<matrix_b, M, N, K, T, LayoutB>& b,
              const fragment<accumulator, M, N, K, float>& c) {
  float out[M * N];
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      float sum = c.x[i * N + j];
      for (int k = 0; k < K; ++k) {
        sum += detail::Widen(a.x[i * K + k]) * detail::Widen(b.x[k * N + j]);
      }
      out[i * N + j] = sum;
    }
  }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
