#include "kernels/cuda/causal_linear_prefill_launch.h"

#include <torch/torch.h>

#include "kernels/cuda/causal_linear_prefill_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

CausalLinearPrefillOutputs CausalLinearPrefillCuda(const torch::Tensor& phi_q,
                                                   const torch::Tensor& phi_k,
                                                   const torch::Tensor& values,
                                                   const torch::Tensor& initial_state) {
  const torch::ScalarType in = phi_q.scalar_type();
  const bool half_precision = (in == torch::kBFloat16 || in == torch::kHalf) &&
                              phi_k.scalar_type() == in && values.scalar_type() == in;
  const torch::ScalarType compute = half_precision ? in : torch::kFloat;
  const torch::Tensor q = phi_q.to(compute).contiguous();
  const torch::Tensor k = phi_k.to(compute).contiguous();
  const torch::Tensor v = values.to(compute).contiguous();
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), M = q.size(3), E = v.size(3);
  const torch::TensorOptions float_options = q.options().dtype(torch::kFloat);
  torch::Tensor initial;
  if (initial_state.defined()) initial = initial_state.to(torch::kFloat).contiguous();
  torch::Tensor out = torch::empty({N, H, L, E}, float_options);
  torch::Tensor final_state = torch::empty({N, H, M, E}, float_options);
  PrefillDtype dtype = PrefillDtype::kFloat32;
  if (compute == torch::kBFloat16) dtype = PrefillDtype::kBFloat16;
  if (compute == torch::kHalf) dtype = PrefillDtype::kFloat16;
  // Long sequences run as parallel segments whose partial states live here.
  const int64_t workspace_floats = CausalLinearPrefillWorkspaceFloats(dtype, N * H, L, M, E);
  torch::Tensor workspace;
  if (workspace_floats > 0) workspace = torch::empty({workspace_floats}, float_options);
  CheckLaunch(
      CausalLinearPrefillForward(dtype, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                 initial.defined() ? initial.data_ptr<float>() : nullptr,
                                 out.data_ptr<float>(), final_state.data_ptr<float>(),
                                 workspace.defined() ? workspace.data_ptr<float>() : nullptr,
                                 workspace_floats, N * H, L, M, E, CurrentStream(q)),
      "CausalLinearPrefill");
  return {out, final_state};
}

}  // namespace performer::kernels::cuda
