#include "kernels/linear_state_step.h"

#include <torch/torch.h>

#include "kernels/cpu/linear_state_step_cpu.h"
#include "kernels/device_check.h"

namespace performer::kernels {

bool LinearStateStepSupported(const torch::Tensor& state) {
  return state.device().is_cpu() && state.scalar_type() == torch::kFloat && state.dim() == 3 &&
         state.is_contiguous();
}

torch::Tensor LinearStateStep(torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
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
  auto f32 = [](const torch::Tensor& t) { return t.to(torch::kFloat).contiguous(); };
  return cpu::LinearStateStepForward(state, f32(q), f32(k), f32(v),
                                     decay.defined() ? f32(decay) : torch::Tensor());
}

}  // namespace performer::kernels
