#include "kernels/cpu/causal_product_cpu.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <c10/core/CPUAllocator.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/simd.h"

namespace performer::kernels::cpu {
namespace {

using simd::Load;
using simd::Store;

// The forward pass and the three gradients are all instances of one sweep:
//
//   out_l = sum_{j <= l in sweep order} (a_l . b_j) c_j
//         = a_l^T state_l,   state_l = sum_{j <= l} b_j c_j^T   (P x R)
//
// with rows of a, b of length P and rows of c, out of length R. A reverse
// sweep runs from the last row to the first (the suffix sums of backward).
//
// Four rows are processed per pass over the state: for a slice of columns
// (one vector), the state is read and written once and updated four times,
// and the four output slices stay in registers across the P rows of the
// state. This halves the memory traffic of the row-at-a-time recurrence,
// which is what bounds it (the state itself stays in L1).
template <typename V, typename T>
PERFORMER_SIMD_INLINE void SweepColumns4(const T* const* a, const T* const* b, const T* const* c,
                                         T* const* out, T* state, int64_t P, int64_t R,
                                         int64_t col) {
  const T* a0 = a[0];
  const T* a1 = a[1];
  const T* a2 = a[2];
  const T* a3 = a[3];
  const T* b0 = b[0];
  const T* b1 = b[1];
  const T* b2 = b[2];
  const T* b3 = b[3];
  V c0, c1, c2, c3;
  Load(&c0, c[0] + col);
  Load(&c1, c[1] + col);
  Load(&c2, c[2] + col);
  Load(&c3, c[3] + col);
  V r0 = {};
  V r1 = {};
  V r2 = {};
  V r3 = {};
  T* s = state + col;
  for (int64_t p = 0; p < P; ++p, s += R) {
    V x;
    Load(&x, s);
    x += b0[p] * c0;
    r0 += a0[p] * x;
    x += b1[p] * c1;
    r1 += a1[p] * x;
    x += b2[p] * c2;
    r2 += a2[p] * x;
    x += b3[p] * c3;
    r3 += a3[p] * x;
    Store(s, x);
  }
  Store(out[0] + col, r0);
  Store(out[1] + col, r1);
  Store(out[2] + col, r2);
  Store(out[3] + col, r3);
}

template <typename V, typename T>
PERFORMER_SIMD_INLINE void SweepColumns1(const T* a, const T* b, const T* c, T* out, T* state,
                                         int64_t P, int64_t R, int64_t col) {
  V cv;
  Load(&cv, c + col);
  V r = {};
  T* s = state + col;
  for (int64_t p = 0; p < P; ++p, s += R) {
    V x;
    Load(&x, s);
    x += b[p] * cv;
    r += a[p] * x;
    Store(s, x);
  }
  Store(out + col, r);
}

template <typename T, int kBytes>
PERFORMER_SIMD_INLINE void Sweep(const T* a, const T* b, const T* c, T* out, T* state, int64_t L,
                                 int64_t P, int64_t R, bool reverse) {
  using V = typename simd::VecOf<T, kBytes>::type;
  constexpr int64_t kLanes = simd::VecOf<T, kBytes>::kLanes;
  std::fill(state, state + P * R, T(0));
  int64_t i = 0;
  for (; i + 4 <= L; i += 4) {
    const T* ap[4];
    const T* bp[4];
    const T* cp[4];
    T* op[4];
    for (int j = 0; j < 4; ++j) {
      const int64_t l = reverse ? L - 1 - (i + j) : i + j;
      ap[j] = a + l * P;
      bp[j] = b + l * P;
      cp[j] = c + l * R;
      op[j] = out + l * R;
    }
    int64_t col = 0;
    for (; col + kLanes <= R; col += kLanes) SweepColumns4<V>(ap, bp, cp, op, state, P, R, col);
    for (; col < R; ++col) SweepColumns4<T>(ap, bp, cp, op, state, P, R, col);
  }
  for (; i < L; ++i) {
    const int64_t l = reverse ? L - 1 - i : i;
    int64_t col = 0;
    for (; col + kLanes <= R; col += kLanes) {
      SweepColumns1<V>(a + l * P, b + l * P, c + l * R, out + l * R, state, P, R, col);
    }
    for (; col < R; ++col) {
      SweepColumns1<T>(a + l * P, b + l * P, c + l * R, out + l * R, state, P, R, col);
    }
  }
}

#if PERFORMER_SIMD_HAVE_AVX2
PERFORMER_SIMD_TARGET_AVX2 void SweepAvx2(const float* a, const float* b, const float* c,
                                          float* out, float* state, int64_t L, int64_t P, int64_t R,
                                          bool reverse) {
  Sweep<float, 32>(a, b, c, out, state, L, P, R, reverse);
}
PERFORMER_SIMD_TARGET_AVX2 void SweepAvx2(const double* a, const double* b, const double* c,
                                          double* out, double* state, int64_t L, int64_t P,
                                          int64_t R, bool reverse) {
  Sweep<double, 32>(a, b, c, out, state, L, P, R, reverse);
}
#endif

void SweepPortable(const float* a, const float* b, const float* c, float* out, float* state,
                   int64_t L, int64_t P, int64_t R, bool reverse) {
  Sweep<float, 16>(a, b, c, out, state, L, P, R, reverse);
}
void SweepPortable(const double* a, const double* b, const double* c, double* out, double* state,
                   int64_t L, int64_t P, int64_t R, bool reverse) {
  Sweep<double, 16>(a, b, c, out, state, L, P, R, reverse);
}

template <typename T>
void RunSweep(const T* a, const T* b, const T* c, T* out, T* state, int64_t L, int64_t P, int64_t R,
              bool reverse) {
#if PERFORMER_SIMD_HAVE_AVX2
  if (simd::UseAvx2Fma()) {
    SweepAvx2(a, b, c, out, state, L, P, R, reverse);
    return;
  }
#endif
  SweepPortable(a, b, c, out, state, L, P, R, reverse);
}

// One sweep over the rows of one (n, h) slice.
struct SweepJob {
  const torch::Tensor* a;
  const torch::Tensor* b;
  const torch::Tensor* c;
  torch::Tensor* out;
  bool reverse;
};

// Runs the jobs for every (n, h) slice; each task keeps one scratch state. The
// grain keeps tiny problems (e.g. one decoding step) on the calling thread.
template <typename T>
void RunSweeps(const std::vector<SweepJob>& jobs, int64_t heads, int64_t L) {
  int64_t max_state = 0;
  int64_t work_per_head = 0;
  for (const SweepJob& job : jobs) {
    const int64_t state = job.a->size(-1) * job.c->size(-1);
    max_state = std::max(max_state, state);
    work_per_head += L * state;
  }
  const int64_t grain =
      std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, work_per_head));
  at::parallel_for(0, heads, grain, [&](int64_t begin, int64_t end) {
    // From the CPU allocator rather than the C++ heap, so that memory
    // accounting through that allocator (bench/memory_tracker.h) sees it.
    const c10::DataPtr scratch = c10::GetCPUAllocator()->allocate(max_state * sizeof(T));
    T* state = static_cast<T*>(scratch.get());
    for (int64_t head = begin; head < end; ++head) {
      for (const SweepJob& job : jobs) {
        const int64_t P = job.a->size(-1);
        const int64_t R = job.c->size(-1);
        RunSweep(job.a->data_ptr<T>() + head * L * P, job.b->data_ptr<T>() + head * L * P,
                 job.c->data_ptr<T>() + head * L * R, job.out->data_ptr<T>() + head * L * R, state,
                 L, P, R, job.reverse);
      }
    }
  });
}

void CheckInputs(const torch::Tensor& queries, const torch::Tensor& keys,
                 const torch::Tensor& values) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
              "CausalDotProduct: expected 4-d (N, H, L, .) queries, keys and values");
  TORCH_CHECK(queries.sizes() == keys.sizes(),
              "CausalDotProduct: queries and keys must have the same shape (N, H, L, E)");
  TORCH_CHECK(values.size(0) == queries.size(0) && values.size(1) == queries.size(1) &&
                  values.size(2) == queries.size(2),
              "CausalDotProduct: values must be (N, H, L, M) with the N, H, L of the queries");
  TORCH_CHECK(
      queries.scalar_type() == keys.scalar_type() && queries.scalar_type() == values.scalar_type(),
      "CausalDotProduct: queries, keys and values must have the same dtype");
  TORCH_CHECK(queries.is_contiguous() && keys.is_contiguous() && values.is_contiguous(),
              "CausalDotProduct (CPU): inputs must be contiguous");
}

}  // namespace

torch::Tensor CausalDotProductForward(const torch::Tensor& queries, const torch::Tensor& keys,
                                      const torch::Tensor& values) {
  CheckInputs(queries, keys, values);
  torch::Tensor out = torch::empty(values.sizes(), values.options());
  const int64_t heads = queries.size(0) * queries.size(1);
  const int64_t L = queries.size(2);
  AT_DISPATCH_FLOATING_TYPES(queries.scalar_type(), "CausalDotProductForward", [&] {
    RunSweeps<scalar_t>({SweepJob{&queries, &keys, &values, &out, false}}, heads, L);
  });
  return out;
}

CausalDotProductGrads CausalDotProductBackward(const torch::Tensor& queries,
                                               const torch::Tensor& keys,
                                               const torch::Tensor& values,
                                               const torch::Tensor& grad_out, bool need_queries,
                                               bool need_keys, bool need_values) {
  CheckInputs(queries, keys, values);
  TORCH_CHECK(grad_out.sizes() == values.sizes() && grad_out.scalar_type() == values.scalar_type(),
              "CausalDotProduct backward: the output gradient must match the values");
  TORCH_CHECK(grad_out.is_contiguous(),
              "CausalDotProduct backward (CPU): the output gradient must be contiguous");
  CausalDotProductGrads grads;
  std::vector<SweepJob> jobs;
  if (need_queries) {
    grads.queries = torch::empty(queries.sizes(), queries.options());
    jobs.push_back(SweepJob{&grad_out, &values, &keys, &grads.queries, false});
  }
  if (need_keys) {
    grads.keys = torch::empty(keys.sizes(), keys.options());
    jobs.push_back(SweepJob{&values, &grad_out, &queries, &grads.keys, true});
  }
  if (need_values) {
    grads.values = torch::empty(values.sizes(), values.options());
    jobs.push_back(SweepJob{&keys, &queries, &grad_out, &grads.values, true});
  }
  if (jobs.empty()) return grads;
  const int64_t heads = queries.size(0) * queries.size(1);
  const int64_t L = queries.size(2);
  AT_DISPATCH_FLOATING_TYPES(queries.scalar_type(), "CausalDotProductBackward",
                             [&] { RunSweeps<scalar_t>(jobs, heads, L); });
  return grads;
}

}  // namespace performer::kernels::cpu
