#include "kernels/cpu/linear_state_step_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/simd.h"

namespace performer::kernels::cpu {
namespace {

// One state row f: s = decay * s + kf * v1; acc += qf * s.
template <typename V>
PERFORMER_SIMD_INLINE void UpdateRow(float* row, const float* v1, float* acc, float decay, float kf,
                                     float qf, int64_t columns) {
  constexpr int64_t kLanes = static_cast<int64_t>(sizeof(V) / sizeof(float));
  int64_t j = 0;
  for (; j + kLanes <= columns; j += kLanes) {
    V s, vv, a;
    simd::Load(&s, row + j);
    simd::Load(&vv, v1 + j);
    simd::Load(&a, acc + j);
    s = s * decay + vv * kf;
    a += s * qf;
    simd::Store(row + j, s);
    simd::Store(acc + j, a);
  }
  for (; j < columns; ++j) {
    const float s = row[j] * decay + v1[j] * kf;
    row[j] = s;
    acc[j] += s * qf;
  }
}

struct StepArgs {
  float* state;
  const float* q;
  const float* k;
  const float* v;
  const float* decay;  // may be null
  float* out;
  int64_t features;
  int64_t columns;                // E + 1
  const StepNormalization* norm;  // may be null
  const FavorFeatures* favor;     // may be null: q, k, decay are then given
  const int64_t* slots;           // may be null (= identity)
  ScanLayout scan;                // tokens per state and where its rows are
};

// The row of token t of state s (see ScanLayout); a step (one token, one
// head) reads row s.
inline int64_t RowOf(const ScanLayout& l, int64_t s, int64_t t) {
  return (s / l.heads) * (l.tokens * l.heads) + t * l.token_stride + (s % l.heads) * l.head_stride;
}

// The FAVOR+ features of row r (see FavorStateStep): e_q + eps into q_out,
// e_k into k_out; returns the decay and advances the running key maximum of
// state `slot`.
inline float FavorRow(const FavorFeatures& fv, int64_t r, int64_t slot, int64_t m, float* q_out,
                      float* k_out) {
  const int64_t b = r / fv.heads, head = r % fv.heads;
  const float* uq = fv.projections + ((b * 2) * fv.heads + head) * m;
  const float* uk = fv.projections + ((b * 2 + 1) * fv.heads + head) * m;
  const float dq = fv.diag[(b * 2) * fv.heads + head];
  const float dk = fv.diag[(b * 2 + 1) * fv.heads + head];
  const float q_max = *std::max_element(uq, uq + m);
  for (int64_t f = 0; f < m; ++f) q_out[f] = std::exp(uq[f] - (dq + q_max)) + fv.kernel_eps;
  const float old_max = fv.key_max[slot];
  const float new_max = std::max(old_max, *std::max_element(uk, uk + m));
  for (int64_t f = 0; f < m; ++f) k_out[f] = std::exp(uk[f] - (dk + new_max));
  fv.key_max[slot] = new_max;
  return std::exp(old_max - new_max);
}

template <int kBytes>
PERFORMER_SIMD_INLINE void StepRows(const StepArgs& a, int64_t begin, int64_t end) {
  using V = typename simd::VecOf<float, kBytes>::type;
  const int64_t m = a.features, c = a.columns, e = c - 1;
  std::vector<float> v1(static_cast<size_t>(c)), scratch(static_cast<size_t>(c));
  std::vector<float> q_features, k_features;
  if (a.favor != nullptr) {
    q_features.resize(static_cast<size_t>(m));
    k_features.resize(static_cast<size_t>(m));
  }
  // One row r (a token of state `slot`). Steps and scans run this one body,
  // so a scan is the same operations as that many steps.
  auto row_body = [&](int64_t r, int64_t slot) {
    std::copy(a.v + r * e, a.v + (r + 1) * e, v1.begin());
    v1[static_cast<size_t>(e)] = 1.0f;
    float* acc = a.norm != nullptr ? scratch.data() : a.out + r * c;
    std::fill(acc, acc + c, 0.0f);
    float decay = a.decay != nullptr ? a.decay[r] : 1.0f;
    float* state = a.state + slot * m * c;
    const float* q;
    const float* k;
    if (a.favor != nullptr) {
      decay = FavorRow(*a.favor, r, slot, m, q_features.data(), k_features.data());
      q = q_features.data();
      k = k_features.data();
    } else {
      q = a.q + r * m;
      k = a.k + r * m;
    }
    float q_sum = 0.0f;
    for (int64_t f = 0; f < m; ++f) {
      UpdateRow<V>(state + f * c, v1.data(), acc, decay, k[f], q[f], c);
      q_sum += q[f];
    }
    if (a.norm == nullptr) return;
    const StepNormalization& n = *a.norm;
    float* sums = n.sums != nullptr ? n.sums + slot * c : nullptr;
    if (sums != nullptr) {
      for (int64_t j = 0; j < c; ++j) sums[j] += v1[static_cast<size_t>(j)];
    }
    auto normalised = [&](int64_t j) {
      return n.scale * acc[j] + (sums != nullptr ? n.offset * q_sum * sums[j] : 0.0f);
    };
    const float denominator = normalised(e) + n.eps * q_sum;
    float* out = a.out + r * e;
    for (int64_t j = 0; j < e; ++j) out[j] = normalised(j) / denominator;
  };
  // States [begin, end), each through its tokens in order.
  for (int64_t s = begin; s < end; ++s) {
    const int64_t slot = a.slots != nullptr ? a.slots[s] : s;
    for (int64_t t = 0; t < a.scan.tokens; ++t) row_body(RowOf(a.scan, s, t), slot);
  }
}

#if PERFORMER_SIMD_HAVE_AVX2
PERFORMER_SIMD_TARGET_AVX2 void StepRowsAvx2(const StepArgs& a, int64_t begin, int64_t end) {
  StepRows<32>(a, begin, end);
}
#endif

void StepRowsPortable(const StepArgs& a, int64_t begin, int64_t end) {
  StepRows<16>(a, begin, end);
}

torch::Tensor RunStep(torch::Tensor& state, const float* q, const float* k, const float* v,
                      const float* decay, const StepNormalization* norm, const FavorFeatures* favor,
                      const int64_t* slots, int64_t rows, const ScanLayout& scan) {
  const int64_t features = state.size(1), columns = state.size(2);
  torch::Tensor out =
      torch::empty({rows, norm != nullptr ? columns - 1 : columns}, state.options());
  StepArgs args{state.data_ptr<float>(),
                q,
                k,
                v,
                decay,
                out.data_ptr<float>(),
                features,
                columns,
                norm,
                favor,
                slots,
                scan};
  // About 64K state elements per task keeps the threads busy without
  // splitting tiny states; the threads split the states, never a state's
  // tokens.
  const int64_t grain =
      std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, features * columns * scan.tokens));
  at::parallel_for(0, rows / scan.tokens, grain, [&](int64_t begin, int64_t end) {
#if PERFORMER_SIMD_HAVE_AVX2
    if (simd::UseAvx2Fma()) {
      StepRowsAvx2(args, begin, end);
      return;
    }
#endif
    StepRowsPortable(args, begin, end);
  });
  return out;
}

}  // namespace

torch::Tensor LinearStateStepForward(torch::Tensor& state, const torch::Tensor& q,
                                     const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& decay, const StepNormalization* norm,
                                     const int64_t* slots, const ScanLayout& scan) {
  return RunStep(state, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                 decay.defined() ? decay.data_ptr<float>() : nullptr, norm, nullptr, slots,
                 q.numel() / state.size(1), scan);
}

torch::Tensor FavorStateStepForward(torch::Tensor& state, const torch::Tensor& v,
                                    const StepNormalization& norm, const FavorFeatures& favor,
                                    const int64_t* slots, const ScanLayout& scan) {
  return RunStep(state, nullptr, nullptr, v.data_ptr<float>(), nullptr, &norm, &favor, slots,
                 v.numel() / (state.size(2) - 1), scan);
}

}  // namespace performer::kernels::cpu
