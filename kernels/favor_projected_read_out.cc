#include "kernels/favor_projected_read_out.h"

#include <torch/torch.h>

#include "kernels/cuda_row_invariance.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/favor_projected_read_out_launch.h"
#endif

namespace performer::kernels {

bool FavorProjectedReadOutSupported(const torch::Tensor& state) {
  if (!state.defined() || !state.is_cuda() || state.scalar_type() != torch::kFloat ||
      state.dim() != 4 || !RowInvariantOn(state.device())) {
    return false;
  }
  const int64_t m = state.size(2), c = state.size(3);
  return state.stride(3) == 1 && state.stride(2) == c && state.stride(1) == m * c;
}

torch::Tensor FavorProjectedReadOut(const torch::Tensor& state, const torch::Tensor& head_inputs,
                                    const torch::Tensor& projection_t, double kernel_eps) {
  const char* op = "FavorProjectedReadOut";
  CheckKernelDevice(op, state, {&head_inputs, &projection_t}, /*cuda_kernel=*/true);
  TORCH_CHECK(FavorProjectedReadOutSupported(state), op,
              ": state must be a float32 (R, H, M, E + 1) CUDA tensor, contiguous but for R, "
              "under kernels::CudaRowInvariance(); got ",
              state.scalar_type(), " ", state.sizes(), " on ", state.device());
  const int64_t rows = state.size(0), heads = state.size(1), m = state.size(2);
  TORCH_CHECK(state.size(3) >= 2, op, ": state needs E >= 1 value columns and the key sums, got ",
              state.sizes());
  TORCH_CHECK(head_inputs.dim() == 3 && head_inputs.size(0) == rows && head_inputs.size(1) == heads,
              op, ": head_inputs must be (R, H, D) = (", rows, ", ", heads, ", D), got ",
              head_inputs.sizes());
  const int64_t d = head_inputs.size(2);
  TORCH_CHECK(projection_t.dim() == 2 && projection_t.size(0) == d && projection_t.size(1) == m, op,
              ": projection_t must be (D, M) = (", d, ", ", m, "), got ", projection_t.sizes());
  torch::NoGradGuard no_grad;
#if PERFORMER_CUDA_KERNELS
  return cuda::FavorProjectedReadOutCuda(state, head_inputs.to(torch::kFloat).contiguous(),
                                         projection_t.to(torch::kFloat).contiguous(), kernel_eps);
#else
  TORCH_CHECK(false, op, ": this build has no CUDA kernels");
#endif
}

}  // namespace performer::kernels
