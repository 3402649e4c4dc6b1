#include "kernels/linear_state_step.h"

#include <torch/torch.h>

#include <atomic>
#include <cmath>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cpu/linear_state_step_cpu.h"
#include "kernels/cuda_row_invariance.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/linear_state_step_launch.h"
#endif

namespace performer::kernels {
namespace {

std::atomic<CudaStepKernel> cuda_step_kernel{CudaStepKernel::kByShape};

}  // namespace

void SetCudaStepKernel(CudaStepKernel kernel) { cuda_step_kernel.store(kernel); }

CudaStepKernel GetCudaStepKernel() { return cuda_step_kernel.load(); }

bool LinearStateStepSupported(const torch::Tensor& state) {
  if (!state.defined() || state.scalar_type() != torch::kFloat || state.dim() != 3 ||
      !state.is_contiguous()) {
    return false;
  }
  if (state.device().is_cpu()) return true;
  return PERFORMER_CUDA_KERNELS != 0 && state.is_cuda();
}

namespace {

// The number of rows R a call steps: slots.size(0), or every state.
int64_t StepRows(const torch::Tensor& state, const torch::Tensor& slots) {
  return slots.defined() ? slots.size(0) : state.size(0);
}

void CheckSlots(const char* op, const torch::Tensor& state, const torch::Tensor& slots) {
  if (!slots.defined()) return;
  TORCH_CHECK(slots.scalar_type() == torch::kLong && slots.dim() == 1 && slots.is_contiguous(), op,
              ": slots must be a contiguous int64 (R,) tensor, got ", slots.sizes(), " ",
              slots.scalar_type());
  const int64_t pool = state.size(0);
  TORCH_CHECK(slots.size(0) <= pool, op, ": ", slots.size(0), " slots for a pool of ", pool,
              " states");
  if (!slots.device().is_cpu()) return;  // see the header: not checked on CUDA
  std::vector<bool> used(static_cast<size_t>(pool), false);
  const int64_t* s = slots.data_ptr<int64_t>();
  for (int64_t r = 0; r < slots.size(0); ++r) {
    TORCH_CHECK(s[r] >= 0 && s[r] < pool, op, ": slot ", s[r], " out of range [0, ", pool, ")");
    TORCH_CHECK(!used[static_cast<size_t>(s[r])], op, ": slot ", s[r], " given twice");
    used[static_cast<size_t>(s[r])] = true;
  }
}

void CheckStepInputs(const torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                     const torch::Tensor& v, const torch::Tensor& decay,
                     const torch::Tensor& slots) {
  CheckKernelDevice("LinearStateStep", state, {&q, &k, &v, &decay, &slots},
                    /*cuda_kernel=*/true);
  TORCH_CHECK(LinearStateStepSupported(state),
              "LinearStateStep: state must be a contiguous float32 (R, M, E+1) tensor on the CPU "
              "(or CUDA when built with kernels/cuda), got ",
              state.sizes(), " ", state.scalar_type(), " on ", state.device());
  CheckSlots("LinearStateStep", state, slots);
  const int64_t rows = StepRows(state, slots), features = state.size(1), columns = state.size(2);
  TORCH_CHECK(q.sizes() == torch::IntArrayRef({rows, features}) && k.sizes() == q.sizes(),
              "LinearStateStep: q and k must be (R, M) = (", rows, ", ", features, "), got ",
              q.sizes(), " and ", k.sizes());
  TORCH_CHECK(v.sizes() == torch::IntArrayRef({rows, columns - 1}),
              "LinearStateStep: v must be (R, E) = (", rows, ", ", columns - 1, "), got ",
              v.sizes());
  TORCH_CHECK(!decay.defined() || decay.sizes() == torch::IntArrayRef({rows}),
              "LinearStateStep: decay must be (R,)");
}

torch::Tensor F32(const torch::Tensor& t) {
  return t.defined() ? t.to(torch::kFloat).contiguous() : t;
}

const int64_t* SlotPointer(const torch::Tensor& slots) {
  return slots.defined() ? slots.data_ptr<int64_t>() : nullptr;
}

// The CPU FAVOR+ step or scan: q' = r (e_q + eps), k' = r (e_k + eps) with
// r = M^-1/2 folded into the normalisation (see FavorStateStep).
torch::Tensor FavorCpu(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                       const torch::Tensor& projections, const torch::Tensor& diag,
                       const torch::Tensor& v, int64_t heads, double kernel_eps,
                       double denominator_eps, const int64_t* slots,
                       const cpu::ScanLayout& layout) {
  const double ratio = 1.0 / std::sqrt(static_cast<double>(state.size(1)));
  torch::Tensor u = F32(projections), d = F32(diag);
  cpu::FavorFeatures favor{u.data_ptr<float>(), d.data_ptr<float>(), key_max.data_ptr<float>(),
                           heads, static_cast<float>(kernel_eps)};
  cpu::StepNormalization norm{sums.data_ptr<float>(), static_cast<float>(ratio * ratio),
                              static_cast<float>(ratio * ratio * kernel_eps),
                              static_cast<float>(denominator_eps * ratio)};
  return cpu::FavorStateStepForward(state, F32(v), norm, favor, slots, layout);
}

// The CPU reference of the projected FAVOR+ step and scan: u = x P^T and
// diag = |x|^2 / (2 sqrt(D)) of head_inputs x [..., D] and projection_t (D, M).
std::pair<torch::Tensor, torch::Tensor> FavorProjections(const torch::Tensor& head_inputs,
                                                         const torch::Tensor& projection_t) {
  const torch::Tensor x = F32(head_inputs);
  const double dims = static_cast<double>(head_inputs.size(-1));
  return {torch::matmul(x, F32(projection_t)), x.square().sum(-1) * (0.5 / std::sqrt(dims))};
}

}  // namespace

torch::Tensor LinearStateStep(torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& decay,
                              const torch::Tensor& slots) {
  CheckStepInputs(state, q, k, v, decay, slots);
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) return cuda::LinearStateStepCuda(state, q, k, v, decay, slots);
#endif
  return cpu::LinearStateStepForward(state, F32(q), F32(k), F32(v), F32(decay), nullptr,
                                     SlotPointer(slots));
}

torch::Tensor LinearStateStepNormalized(torch::Tensor& state, const torch::Tensor& q,
                                        const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& decay, torch::Tensor sums,
                                        double scale, double offset, double eps,
                                        const torch::Tensor& slots) {
  CheckStepInputs(state, q, k, v, decay, slots);
  CheckKernelDevice("LinearStateStep", state, {&sums}, /*cuda_kernel=*/true);
  TORCH_CHECK(
      !sums.defined() || (sums.sizes() == torch::IntArrayRef({state.size(0), state.size(2)}) &&
                          sums.scalar_type() == torch::kFloat && sums.is_contiguous()),
      "LinearStateStep: sums must be a contiguous float32 (P, E+1) tensor, P = ", state.size(0));
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) {
    return cuda::LinearStateStepNormalizedCuda(state, q, k, v, decay, sums, scale, offset, eps,
                                               slots);
  }
#endif
  cpu::StepNormalization norm{sums.defined() ? sums.data_ptr<float>() : nullptr,
                              static_cast<float>(scale), static_cast<float>(offset),
                              static_cast<float>(eps)};
  return cpu::LinearStateStepForward(state, F32(q), F32(k), F32(v), F32(decay), &norm,
                                     SlotPointer(slots));
}

namespace {

// The checks FavorStateStep and FavorProjectedStateStep share: the state,
// slots, v (R, E), key_max (P,) and sums (P, E + 1). `inputs` are the
// caller's per-row inputs, which must be on the state's device.
void CheckFavorState(const char* op, const torch::Tensor& state, const torch::Tensor& key_max,
                     const torch::Tensor& sums, const torch::Tensor& v,
                     std::initializer_list<const torch::Tensor*> inputs,
                     const torch::Tensor& slots) {
  CheckKernelDevice(op, state, {&key_max, &sums, &v, &slots}, /*cuda_kernel=*/true);
  CheckKernelDevice(op, state, inputs, /*cuda_kernel=*/true);
  TORCH_CHECK(LinearStateStepSupported(state), op,
              ": state must be a contiguous float32 (R, M, E+1) tensor on the CPU "
              "(or CUDA when built with kernels/cuda), got ",
              state.sizes(), " ", state.scalar_type(), " on ", state.device());
  CheckSlots(op, state, slots);
  const int64_t pool = state.size(0), rows = StepRows(state, slots), columns = state.size(2);
  TORCH_CHECK(v.sizes() == torch::IntArrayRef({rows, columns - 1}), op, ": v must be (R, E), got ",
              v.sizes());
  for (const torch::Tensor* t : {&key_max, &sums}) {
    TORCH_CHECK(t->scalar_type() == torch::kFloat && t->is_contiguous(), op,
                ": key_max and sums must be contiguous float32");
  }
  TORCH_CHECK(key_max.numel() == pool && sums.numel() == pool * columns, op,
              ": key_max must be (P,) and sums (P, E+1) with P = ", pool);
}

}  // namespace

torch::Tensor FavorStateStep(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                             const torch::Tensor& projections, const torch::Tensor& diag,
                             const torch::Tensor& v, double kernel_eps, double denominator_eps,
                             const torch::Tensor& slots) {
  CheckFavorState("FavorStateStep", state, key_max, sums, v, {&projections, &diag}, slots);
  const int64_t rows = StepRows(state, slots), features = state.size(1);
  TORCH_CHECK(projections.dim() == 4 && projections.size(1) == 2 &&
                  projections.size(3) == features &&
                  projections.size(0) * projections.size(2) == rows,
              "FavorStateStep: projections must be (B, 2, H, M) with B*H = ", rows,
              " and M = ", features, ", got ", projections.sizes());
  const int64_t heads = projections.size(2);
  TORCH_CHECK(diag.sizes() == torch::IntArrayRef({projections.size(0), 2, heads}),
              "FavorStateStep: diag must be (B, 2, H), got ", diag.sizes());
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) {
    return cuda::FavorStateStepCuda(state, key_max, sums, projections, diag, v, kernel_eps,
                                    denominator_eps, slots);
  }
#endif
  return FavorCpu(state, key_max, sums, projections, diag, v, heads, kernel_eps, denominator_eps,
                  SlotPointer(slots), {});
}

torch::Tensor FavorProjectedStateStep(torch::Tensor& state, torch::Tensor& key_max,
                                      torch::Tensor& sums, const torch::Tensor& head_inputs,
                                      const torch::Tensor& projection_t, const torch::Tensor& v,
                                      double kernel_eps, double denominator_eps,
                                      const torch::Tensor& slots) {
  CheckFavorState("FavorProjectedStateStep", state, key_max, sums, v, {&head_inputs, &projection_t},
                  slots);
  const int64_t rows = StepRows(state, slots), features = state.size(1);
  TORCH_CHECK(head_inputs.dim() == 4 && head_inputs.size(1) == 2 &&
                  head_inputs.size(0) * head_inputs.size(2) == rows && head_inputs.size(3) >= 1,
              "FavorProjectedStateStep: head_inputs must be (B, 2, H, D) with B*H = ", rows,
              ", got ", head_inputs.sizes());
  const int64_t dims = head_inputs.size(3);
  TORCH_CHECK(projection_t.sizes() == torch::IntArrayRef({dims, features}),
              "FavorProjectedStateStep: projection_t must be (D, M) = (", dims, ", ", features,
              "), got ", projection_t.sizes());
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) {
    return cuda::FavorProjectedStateStepCuda(state, key_max, sums, head_inputs, projection_t, v,
                                             kernel_eps, denominator_eps, slots);
  }
#endif
  const auto [u, diag] = FavorProjections(head_inputs, projection_t);
  return FavorCpu(state, key_max, sums, u, diag, v, head_inputs.size(2), kernel_eps,
                  denominator_eps, SlotPointer(slots), {});
}

bool LinearStateScanSupported(const torch::Tensor& state) {
  if (!state.defined() || state.scalar_type() != torch::kFloat || state.dim() < 3 ||
      !state.is_contiguous()) {
    return false;
  }
  return RowInvariantOn(state.device());
}

namespace {

void CheckScanState(const char* op, const torch::Tensor& state) {
  TORCH_CHECK(LinearStateScanSupported(state) && state.dim() == 3, op,
              ": state must be a contiguous float32 (S, M, E+1) tensor on the CPU (or on CUDA "
              "under kernels::CudaRowInvariance()), got ",
              state.sizes(), " ", state.scalar_type(), " on ", state.device());
}

void CheckScanTensor(const char* op, const char* name, const torch::Tensor& t,
                     torch::IntArrayRef shape, const torch::Tensor& state) {
  TORCH_CHECK(t.sizes() == shape, op, ": ", name, " must be ", shape, ", got ", t.sizes());
  TORCH_CHECK(t.device() == state.device(), op, ": ", name, " must be on the state's device (",
              state.device(), "), got ", t.device());
}

// Token-major rows [C, T, H] of C*H states.
cpu::ScanLayout TokenMajor(int64_t tokens, int64_t heads) {
  return {tokens, heads, /*token_stride=*/heads, /*head_stride=*/1};
}

}  // namespace

torch::Tensor LinearStateScan(torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v) {
  CheckScanState("LinearStateScan", state);
  const int64_t states = state.size(0), m = state.size(1), e = state.size(2) - 1;
  const int64_t tokens = q.dim() == 3 ? q.size(1) : 0;
  CheckScanTensor("LinearStateScan", "q", q, {states, tokens, m}, state);
  CheckScanTensor("LinearStateScan", "k", k, {states, tokens, m}, state);
  CheckScanTensor("LinearStateScan", "v", v, {states, tokens, e}, state);
  if (tokens == 0) return torch::empty({states, 0, e + 1}, state.options());
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) return cuda::LinearStateScanCuda(state, q, k, v);
#endif
  const cpu::ScanLayout layout{tokens, /*heads=*/1, /*token_stride=*/1, /*head_stride=*/0};
  return cpu::LinearStateStepForward(state, F32(q), F32(k), F32(v), torch::Tensor(), nullptr,
                                     nullptr, layout)
      .view({states, tokens, e + 1});
}

torch::Tensor LinearStateScanNormalized(torch::Tensor& state, const torch::Tensor& q,
                                        const torch::Tensor& k, const torch::Tensor& v,
                                        torch::Tensor sums, double scale, double offset,
                                        double eps) {
  CheckScanState("LinearStateScanNormalized", state);
  TORCH_CHECK(q.dim() == 4, "LinearStateScanNormalized: q must be (C, T, H, M)");
  const int64_t c = q.size(0), tokens = q.size(1), heads = q.size(2);
  const int64_t m = state.size(1), e = state.size(2) - 1;
  TORCH_CHECK(state.size(0) == c * heads, "LinearStateScanNormalized: ", state.size(0),
              " states for ", c, " sequences of ", heads, " heads");
  CheckScanTensor("LinearStateScanNormalized", "q", q, {c, tokens, heads, m}, state);
  CheckScanTensor("LinearStateScanNormalized", "k", k, {c, tokens, heads, m}, state);
  CheckScanTensor("LinearStateScanNormalized", "v", v, {c, tokens, heads, e}, state);
  if (sums.defined()) {
    CheckScanTensor("LinearStateScanNormalized", "sums", sums, {c * heads, e + 1}, state);
    TORCH_CHECK(sums.scalar_type() == torch::kFloat && sums.is_contiguous(),
                "LinearStateScanNormalized: sums must be contiguous float32");
  }
  if (tokens == 0) return torch::empty({c, 0, heads, e}, state.options());
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) {
    return cuda::LinearStateScanNormalizedCuda(state, q, k, v, sums, scale, offset, eps);
  }
#endif
  cpu::StepNormalization norm{sums.defined() ? sums.data_ptr<float>() : nullptr,
                              static_cast<float>(scale), static_cast<float>(offset),
                              static_cast<float>(eps)};
  return cpu::LinearStateStepForward(state, F32(q), F32(k), F32(v), torch::Tensor(), &norm, nullptr,
                                     TokenMajor(tokens, heads))
      .view({c, tokens, heads, e});
}

torch::Tensor FavorStateScan(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                             const torch::Tensor& projections, const torch::Tensor& diag,
                             const torch::Tensor& v, double kernel_eps, double denominator_eps) {
  CheckScanState("FavorStateScan", state);
  TORCH_CHECK(projections.dim() == 5 && projections.size(2) == 2,
              "FavorStateScan: projections must be (C, T, 2, H, M), got ", projections.sizes());
  const int64_t c = projections.size(0), tokens = projections.size(1), heads = projections.size(3);
  const int64_t m = state.size(1), e = state.size(2) - 1;
  TORCH_CHECK(state.size(0) == c * heads, "FavorStateScan: ", state.size(0), " states for ", c,
              " sequences of ", heads, " heads");
  CheckScanTensor("FavorStateScan", "projections", projections, {c, tokens, 2, heads, m}, state);
  CheckScanTensor("FavorStateScan", "diag", diag, {c, tokens, 2, heads}, state);
  CheckScanTensor("FavorStateScan", "v", v, {c, tokens, heads, e}, state);
  CheckScanTensor("FavorStateScan", "key_max", key_max, {c * heads}, state);
  CheckScanTensor("FavorStateScan", "sums", sums, {c * heads, e + 1}, state);
  for (const torch::Tensor* t : {&key_max, &sums}) {
    TORCH_CHECK(t->scalar_type() == torch::kFloat && t->is_contiguous(),
                "FavorStateScan: key_max and sums must be contiguous float32");
  }
  if (tokens == 0) return torch::empty({c, 0, heads, e}, state.options());
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) {
    return cuda::FavorStateScanCuda(state, key_max, sums, projections, diag, v, kernel_eps,
                                    denominator_eps);
  }
#endif
  return FavorCpu(state, key_max, sums, projections, diag, v, heads, kernel_eps, denominator_eps,
                  nullptr, TokenMajor(tokens, heads))
      .view({c, tokens, heads, e});
}

torch::Tensor FavorProjectedStateScan(torch::Tensor& state, torch::Tensor& key_max,
                                      torch::Tensor& sums, const torch::Tensor& head_inputs,
                                      const torch::Tensor& projection_t, const torch::Tensor& v,
                                      double kernel_eps, double denominator_eps) {
  CheckScanState("FavorProjectedStateScan", state);
  TORCH_CHECK(head_inputs.dim() == 5 && head_inputs.size(2) == 2 && head_inputs.size(4) >= 1,
              "FavorProjectedStateScan: head_inputs must be (C, T, 2, H, D), got ",
              head_inputs.sizes());
  const int64_t c = head_inputs.size(0), tokens = head_inputs.size(1), heads = head_inputs.size(3);
  const int64_t dims = head_inputs.size(4), m = state.size(1), e = state.size(2) - 1;
  TORCH_CHECK(state.size(0) == c * heads, "FavorProjectedStateScan: ", state.size(0),
              " states for ", c, " sequences of ", heads, " heads");
  CheckScanTensor("FavorProjectedStateScan", "head_inputs", head_inputs,
                  {c, tokens, 2, heads, dims}, state);
  CheckScanTensor("FavorProjectedStateScan", "projection_t", projection_t, {dims, m}, state);
  CheckScanTensor("FavorProjectedStateScan", "v", v, {c, tokens, heads, e}, state);
  CheckScanTensor("FavorProjectedStateScan", "key_max", key_max, {c * heads}, state);
  CheckScanTensor("FavorProjectedStateScan", "sums", sums, {c * heads, e + 1}, state);
  if (tokens == 0) return torch::empty({c, 0, heads, e}, state.options());
#if PERFORMER_CUDA_KERNELS
  if (state.is_cuda()) {
    return cuda::FavorProjectedStateScanCuda(state, key_max, sums, head_inputs, projection_t, v,
                                             kernel_eps, denominator_eps);
  }
#endif
  // The reference, as FavorProjectedStateStep's on the CPU.
  const auto [u, diag] = FavorProjections(head_inputs, projection_t);
  return FavorStateScan(state, key_max, sums, u, diag, v, kernel_eps, denominator_eps);
}

}  // namespace performer::kernels
