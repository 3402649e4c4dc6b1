#include "kernels/linear_state_step.h"

#include <torch/torch.h>

#include <cmath>

#include "kernels/cpu/linear_state_step_cpu.h"
#include "kernels/device_check.h"

namespace performer::kernels {

bool LinearStateStepSupported(const torch::Tensor& state) {
  return state.device().is_cpu() && state.scalar_type() == torch::kFloat && state.dim() == 3 &&
         state.is_contiguous();
}

namespace {

void CheckStepInputs(const torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                     const torch::Tensor& v, const torch::Tensor& decay) {
  CheckKernelDevice("LinearStateStep", state, {&q, &k, &v});
  TORCH_CHECK(LinearStateStepSupported(state),
              "LinearStateStep: state must be a contiguous float32 (R, M, E+1) CPU tensor, got ",
              state.sizes(), " ", state.scalar_type());
  const int64_t rows = state.size(0), features = state.size(1), columns = state.size(2);
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

}  // namespace

torch::Tensor LinearStateStep(torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const torch::Tensor& decay) {
  CheckStepInputs(state, q, k, v, decay);
  return cpu::LinearStateStepForward(state, F32(q), F32(k), F32(v), F32(decay));
}

torch::Tensor LinearStateStepNormalized(torch::Tensor& state, const torch::Tensor& q,
                                        const torch::Tensor& k, const torch::Tensor& v,
                                        const torch::Tensor& decay, torch::Tensor sums,
                                        double scale, double offset, double eps) {
  CheckStepInputs(state, q, k, v, decay);
  TORCH_CHECK(
      !sums.defined() ||
          (sums.sizes() == torch::IntArrayRef({state.size(0), state.size(2)}) &&
           sums.scalar_type() == torch::kFloat && sums.is_contiguous() && sums.device().is_cpu()),
      "LinearStateStep: sums must be a contiguous float32 (R, E+1) CPU tensor");
  cpu::StepNormalization norm{sums.defined() ? sums.data_ptr<float>() : nullptr,
                              static_cast<float>(scale), static_cast<float>(offset),
                              static_cast<float>(eps)};
  return cpu::LinearStateStepForward(state, F32(q), F32(k), F32(v), F32(decay), &norm);
}

torch::Tensor FavorStateStep(torch::Tensor& state, torch::Tensor& key_max, torch::Tensor& sums,
                             const torch::Tensor& projections, const torch::Tensor& diag,
                             const torch::Tensor& v, double kernel_eps, double denominator_eps) {
  CheckKernelDevice("FavorStateStep", state, {&key_max, &sums, &projections, &diag, &v});
  TORCH_CHECK(LinearStateStepSupported(state),
              "FavorStateStep: state must be a contiguous float32 (R, M, E+1) CPU tensor");
  const int64_t rows = state.size(0), features = state.size(1), columns = state.size(2);
  TORCH_CHECK(projections.dim() == 4 && projections.size(1) == 2 &&
                  projections.size(3) == features &&
                  projections.size(0) * projections.size(2) == rows,
              "FavorStateStep: projections must be (B, 2, H, M) with B*H = ", rows,
              " and M = ", features, ", got ", projections.sizes());
  const int64_t heads = projections.size(2);
  TORCH_CHECK(diag.sizes() == torch::IntArrayRef({projections.size(0), 2, heads}),
              "FavorStateStep: diag must be (B, 2, H), got ", diag.sizes());
  TORCH_CHECK(v.sizes() == torch::IntArrayRef({rows, columns - 1}),
              "FavorStateStep: v must be (R, E), got ", v.sizes());
  for (const torch::Tensor* t : {&key_max, &sums}) {
    TORCH_CHECK(t->scalar_type() == torch::kFloat && t->is_contiguous(),
                "FavorStateStep: key_max and sums must be contiguous float32");
  }
  TORCH_CHECK(key_max.numel() == rows && sums.numel() == rows * columns,
              "FavorStateStep: key_max must be (R,) and sums (R, E+1)");
  const double ratio = 1.0 / std::sqrt(static_cast<double>(features));
  torch::Tensor u = F32(projections), d = F32(diag);
  cpu::FavorFeatures favor{u.data_ptr<float>(), d.data_ptr<float>(), key_max.data_ptr<float>(),
                           heads, static_cast<float>(kernel_eps)};
  cpu::StepNormalization norm{sums.data_ptr<float>(), static_cast<float>(ratio * ratio),
                              static_cast<float>(ratio * ratio * kernel_eps),
                              static_cast<float>(denominator_eps * ratio)};
  return cpu::FavorStateStepForward(state, F32(v), norm, favor);
}

}  // namespace performer::kernels
