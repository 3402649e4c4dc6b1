#include "kernels/cpu/local_product_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>

#include "kernels/cpu/simd.h"

namespace performer::kernels::cpu {
namespace {

// The value of every slot that holds no valid key (fast-transformers fills
// with the float constant -1e24, not -inf, so softmax stays finite).
constexpr double kMaskedScore = -1e24;

// Everything one of the row kernels below may need; each uses a subset.
template <typename T>
struct LocalArgs {
  const T* queries = nullptr;            // (N*H, L, E)
  const T* keys = nullptr;               // (N*H, S, E)
  const T* mask = nullptr;               // (L, S)
  const int64_t* key_lengths = nullptr;  // (N,)
  const T* attention = nullptr;          // (N*H, L, c)
  const T* values = nullptr;             // (N*H, S, D)
  const T* grad = nullptr;               // gradient of the op's output
  T* out = nullptr;                      // the row-major output of the kernel
  int64_t heads_per_batch = 1;           // H
  int64_t L = 0;
  int64_t S = 0;
  int64_t width = 0;  // E for the dot product, D for the weighted average
  int64_t context = 0;
  int64_t half = 0;   // floor(c/2): keys before the query
  int64_t after = 0;  // ceil(c/2): the query and the keys after it

  // Keys usable by head `head`: s < min(key_lengths[n], S) (or S when no
  // lengths apply).
  int64_t KeyLimit(int64_t head) const {
    if (key_lengths == nullptr) return S;
    return std::clamp<int64_t>(key_lengths[head / heads_per_batch], 0, S);
  }
  // Queries whose window contains key s: s - after < l <= s + half.
  int64_t FirstQuery(int64_t s) const { return std::max<int64_t>(0, s - after + 1); }
  int64_t EndQuery(int64_t s) const { return std::min<int64_t>(L, s + half + 1); }
};

// Each kernel handles the flattened rows [begin, end) of its output.

// scores rows (head, l).
struct DotForwardRows {
  template <typename T, int kBytes>
  static PERFORMER_SIMD_INLINE void Run(const LocalArgs<T>& a, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / a.L;
      const int64_t l = row % a.L;
      T* out = a.out + row * a.context;
      std::fill(out, out + a.context, static_cast<T>(kMaskedScore));
      const T* q = a.queries + row * a.width;
      const int64_t s_end = std::min(a.KeyLimit(head), l + a.after);
      for (int64_t s = std::max<int64_t>(0, l - a.half); s < s_end; ++s) {
        const T* k = a.keys + (head * a.S + s) * a.width;
        out[s - l + a.half] = simd::Dot<T, kBytes>(q, k, a.width) + a.mask[l * a.S + s];
      }
    }
  }
};

// dQ rows (head, l).
struct DotBackwardQueryRows {
  template <typename T, int kBytes>
  static PERFORMER_SIMD_INLINE void Run(const LocalArgs<T>& a, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / a.L;
      const int64_t l = row % a.L;
      T* dq = a.out + row * a.width;
      std::fill(dq, dq + a.width, T(0));
      const T* g = a.grad + row * a.context;
      const int64_t s_end = std::min(a.KeyLimit(head), l + a.after);
      for (int64_t s = std::max<int64_t>(0, l - a.half); s < s_end; ++s) {
        simd::Axpy<T, kBytes>(g[s - l + a.half], a.keys + (head * a.S + s) * a.width, dq, a.width);
      }
    }
  }
};

// dK rows (head, s).
struct DotBackwardKeyRows {
  template <typename T, int kBytes>
  static PERFORMER_SIMD_INLINE void Run(const LocalArgs<T>& a, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / a.S;
      const int64_t s = row % a.S;
      T* dk = a.out + row * a.width;
      std::fill(dk, dk + a.width, T(0));
      if (s >= a.KeyLimit(head)) continue;
      for (int64_t l = a.FirstQuery(s); l < a.EndQuery(s); ++l) {
        const int64_t query_row = head * a.L + l;
        simd::Axpy<T, kBytes>(a.grad[query_row * a.context + s - l + a.half],
                              a.queries + query_row * a.width, dk, a.width);
      }
    }
  }
};

// Output rows (head, l).
struct AverageForwardRows {
  template <typename T, int kBytes>
  static PERFORMER_SIMD_INLINE void Run(const LocalArgs<T>& a, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / a.L;
      const int64_t l = row % a.L;
      T* out = a.out + row * a.width;
      std::fill(out, out + a.width, T(0));
      const T* weights = a.attention + row * a.context;
      const int64_t s_end = std::min(a.S, l + a.after);
      for (int64_t s = std::max<int64_t>(0, l - a.half); s < s_end; ++s) {
        simd::Axpy<T, kBytes>(weights[s - l + a.half], a.values + (head * a.S + s) * a.width, out,
                              a.width);
      }
    }
  }
};

// dA rows (head, l).
struct AverageBackwardAttentionRows {
  template <typename T, int kBytes>
  static PERFORMER_SIMD_INLINE void Run(const LocalArgs<T>& a, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / a.L;
      const int64_t l = row % a.L;
      T* da = a.out + row * a.context;
      std::fill(da, da + a.context, T(0));
      const T* g = a.grad + row * a.width;
      const int64_t s_end = std::min(a.S, l + a.after);
      for (int64_t s = std::max<int64_t>(0, l - a.half); s < s_end; ++s) {
        da[s - l + a.half] =
            simd::Dot<T, kBytes>(g, a.values + (head * a.S + s) * a.width, a.width);
      }
    }
  }
};

// dV rows (head, s).
struct AverageBackwardValueRows {
  template <typename T, int kBytes>
  static PERFORMER_SIMD_INLINE void Run(const LocalArgs<T>& a, int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t head = row / a.S;
      const int64_t s = row % a.S;
      T* dv = a.out + row * a.width;
      std::fill(dv, dv + a.width, T(0));
      for (int64_t l = a.FirstQuery(s); l < a.EndQuery(s); ++l) {
        const int64_t query_row = head * a.L + l;
        simd::Axpy<T, kBytes>(a.attention[query_row * a.context + s - l + a.half],
                              a.grad + query_row * a.width, dv, a.width);
      }
    }
  }
};

#if PERFORMER_SIMD_HAVE_AVX2
template <typename Kernel, typename T>
PERFORMER_SIMD_TARGET_AVX2 void RunRowsAvx2(const LocalArgs<T>& args, int64_t begin, int64_t end) {
  Kernel::template Run<T, 32>(args, begin, end);
}
#endif

template <typename Kernel, typename T>
void RunRowsPortable(const LocalArgs<T>& args, int64_t begin, int64_t end) {
  Kernel::template Run<T, 16>(args, begin, end);
}

// Runs Kernel over `rows` output rows, each costing about c * width
// multiply-adds, in parallel.
template <typename Kernel, typename T>
void ParallelRows(const LocalArgs<T>& args, int64_t rows) {
  const int64_t cost_per_row = std::max<int64_t>(1, args.context * args.width);
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / cost_per_row);
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
#if PERFORMER_SIMD_HAVE_AVX2
    if (simd::UseAvx2Fma()) {
      RunRowsAvx2<Kernel>(args, begin, end);
      return;
    }
#endif
    RunRowsPortable<Kernel>(args, begin, end);
  });
}

void CheckFloating(const char* op, const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": inputs must have the same dtype (got ",
              a.scalar_type(), " and ", b.scalar_type(), ")");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), op, " (CPU): inputs must be contiguous");
}

void CheckDotInputs(const torch::Tensor& queries, const torch::Tensor& keys,
                    const torch::Tensor& key_lengths, int64_t local_context) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4,
              "LocalDotProduct: expected queries (N, H, L, E) and keys (N, H, S, E)");
  TORCH_CHECK(keys.size(0) == queries.size(0) && keys.size(1) == queries.size(1) &&
                  keys.size(3) == queries.size(3),
              "LocalDotProduct: keys must be (N, H, S, E) with the N, H, E of the queries");
  TORCH_CHECK(local_context > 0, "LocalDotProduct: local_context must be positive, got ",
              local_context);
  TORCH_CHECK(key_lengths.dim() == 1 && key_lengths.size(0) == queries.size(0) &&
                  key_lengths.scalar_type() == torch::kLong && key_lengths.is_contiguous(),
              "LocalDotProduct: key_lengths must be a contiguous int64 vector (N,)");
  CheckFloating("LocalDotProduct", queries, keys);
}

void CheckAverageInputs(const torch::Tensor& attention, const torch::Tensor& values) {
  TORCH_CHECK(attention.dim() == 4 && values.dim() == 4,
              "LocalWeightedAverage: expected attention (N, H, L, c) and values (N, H, S, D)");
  TORCH_CHECK(values.size(0) == attention.size(0) && values.size(1) == attention.size(1),
              "LocalWeightedAverage: attention and values must share N and H");
  TORCH_CHECK(attention.size(3) > 0, "LocalWeightedAverage: the local context must be positive");
  CheckFloating("LocalWeightedAverage", attention, values);
}

template <typename T>
LocalArgs<T> MakeArgs(int64_t heads_per_batch, int64_t L, int64_t S, int64_t width,
                      int64_t context) {
  LocalArgs<T> args;
  args.heads_per_batch = std::max<int64_t>(1, heads_per_batch);
  args.L = L;
  args.S = S;
  args.width = width;
  args.context = context;
  args.half = context / 2;
  args.after = (context + 1) / 2;
  return args;
}

}  // namespace

torch::Tensor LocalDotProductForward(const torch::Tensor& queries, const torch::Tensor& keys,
                                     const torch::Tensor& attn_mask_finite,
                                     const torch::Tensor& key_lengths, int64_t local_context) {
  CheckDotInputs(queries, keys, key_lengths, local_context);
  const int64_t N = queries.size(0), H = queries.size(1), L = queries.size(2);
  const int64_t S = keys.size(2), E = queries.size(3);
  TORCH_CHECK(
      attn_mask_finite.dim() == 2 && attn_mask_finite.size(0) == L && attn_mask_finite.size(1) == S,
      "LocalDotProduct: attn_mask_finite must be (L, S) = (", L, ", ", S, "), got ",
      attn_mask_finite.sizes());
  CheckFloating("LocalDotProduct", queries, attn_mask_finite);
  torch::Tensor scores = torch::empty({N, H, L, local_context}, queries.options());
  AT_DISPATCH_FLOATING_TYPES(queries.scalar_type(), "LocalDotProductForward", [&] {
    LocalArgs<scalar_t> args = MakeArgs<scalar_t>(H, L, S, E, local_context);
    args.queries = queries.data_ptr<scalar_t>();
    args.keys = keys.data_ptr<scalar_t>();
    args.mask = attn_mask_finite.data_ptr<scalar_t>();
    args.key_lengths = key_lengths.data_ptr<int64_t>();
    args.out = scores.data_ptr<scalar_t>();
    ParallelRows<DotForwardRows>(args, N * H * L);
  });
  return scores;
}

LocalDotProductGrads LocalDotProductBackward(
    const torch::Tensor& queries, const torch::Tensor& keys, const torch::Tensor& key_lengths,
    const torch::Tensor& grad_scores, int64_t local_context, bool need_queries, bool need_keys) {
  CheckDotInputs(queries, keys, key_lengths, local_context);
  const int64_t N = queries.size(0), H = queries.size(1), L = queries.size(2);
  const int64_t S = keys.size(2), E = queries.size(3);
  TORCH_CHECK(grad_scores.sizes() == torch::IntArrayRef({N, H, L, local_context}),
              "LocalDotProduct backward: the gradient must be (N, H, L, c)");
  CheckFloating("LocalDotProduct backward", queries, grad_scores);
  LocalDotProductGrads grads;
  AT_DISPATCH_FLOATING_TYPES(queries.scalar_type(), "LocalDotProductBackward", [&] {
    LocalArgs<scalar_t> args = MakeArgs<scalar_t>(H, L, S, E, local_context);
    args.queries = queries.data_ptr<scalar_t>();
    args.keys = keys.data_ptr<scalar_t>();
    args.key_lengths = key_lengths.data_ptr<int64_t>();
    args.grad = grad_scores.data_ptr<scalar_t>();
    if (need_queries) {
      grads.queries = torch::empty(queries.sizes(), queries.options());
      args.out = grads.queries.data_ptr<scalar_t>();
      ParallelRows<DotBackwardQueryRows>(args, N * H * L);
    }
    if (need_keys) {
      grads.keys = torch::empty(keys.sizes(), keys.options());
      args.out = grads.keys.data_ptr<scalar_t>();
      ParallelRows<DotBackwardKeyRows>(args, N * H * S);
    }
  });
  return grads;
}

torch::Tensor LocalWeightedAverageForward(const torch::Tensor& attention,
                                          const torch::Tensor& values) {
  CheckAverageInputs(attention, values);
  const int64_t N = attention.size(0), H = attention.size(1), L = attention.size(2);
  const int64_t context = attention.size(3), S = values.size(2), D = values.size(3);
  torch::Tensor out = torch::empty({N, H, L, D}, values.options());
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "LocalWeightedAverageForward", [&] {
    LocalArgs<scalar_t> args = MakeArgs<scalar_t>(H, L, S, D, context);
    args.attention = attention.data_ptr<scalar_t>();
    args.values = values.data_ptr<scalar_t>();
    args.out = out.data_ptr<scalar_t>();
    ParallelRows<AverageForwardRows>(args, N * H * L);
  });
  return out;
}

LocalWeightedAverageGrads LocalWeightedAverageBackward(const torch::Tensor& attention,
                                                       const torch::Tensor& values,
                                                       const torch::Tensor& grad_out,
                                                       bool need_attention, bool need_values) {
  CheckAverageInputs(attention, values);
  const int64_t N = attention.size(0), H = attention.size(1), L = attention.size(2);
  const int64_t context = attention.size(3), S = values.size(2), D = values.size(3);
  TORCH_CHECK(grad_out.sizes() == torch::IntArrayRef({N, H, L, D}),
              "LocalWeightedAverage backward: the gradient must be (N, H, L, D)");
  CheckFloating("LocalWeightedAverage backward", values, grad_out);
  LocalWeightedAverageGrads grads;
  AT_DISPATCH_FLOATING_TYPES(values.scalar_type(), "LocalWeightedAverageBackward", [&] {
    LocalArgs<scalar_t> args = MakeArgs<scalar_t>(H, L, S, D, context);
    args.attention = attention.data_ptr<scalar_t>();
    args.values = values.data_ptr<scalar_t>();
    args.grad = grad_out.data_ptr<scalar_t>();
    if (need_attention) {
      grads.attention = torch::empty(attention.sizes(), attention.options());
      args.out = grads.attention.data_ptr<scalar_t>();
      ParallelRows<AverageBackwardAttentionRows>(args, N * H * L);
    }
    if (need_values) {
      grads.values = torch::empty(values.sizes(), values.options());
      args.out = grads.values.data_ptr<scalar_t>();
      ParallelRows<AverageBackwardValueRows>(args, N * H * S);
    }
  });
  return grads;
}

}  // namespace performer::kernels::cpu
