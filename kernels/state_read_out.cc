#include "kernels/state_read_out.h"

#include <torch/torch.h>

#include "kernels/cuda_row_invariance.h"
#include "kernels/device_check.h"
#if PERFORMER_CUDA_KERNELS
#include "kernels/cuda/state_read_out_launch.h"
#endif

namespace performer::kernels {
namespace {

// The checks both read-outs share: the state's layout and queries [R, H, *].
void CheckStateAndQueries(const char* op, const torch::Tensor& state,
                          const torch::Tensor& queries) {
  TORCH_CHECK(StateReadOutSupported(state), op,
              ": state must be a float32 (R, H, M, E + 1) CUDA tensor, contiguous but for R, "
              "under kernels::CudaRowInvariance(); got ",
              state.scalar_type(), " ", state.sizes(), " on ", state.device());
  TORCH_CHECK(state.size(3) >= 2, op, ": state needs E >= 1 value columns and the key sums, got ",
              state.sizes());
  TORCH_CHECK(
      queries.dim() == 3 && queries.size(0) == state.size(0) && queries.size(1) == state.size(1),
      op, ": the queries must be (R, H, *) = (", state.size(0), ", ", state.size(1), ", *), got ",
      queries.sizes());
}

}  // namespace

bool StateReadOutSupported(const torch::Tensor& state) {
  if (!state.defined() || !state.is_cuda() || state.scalar_type() != torch::kFloat ||
      state.dim() != 4 || !RowInvariantOn(state.device())) {
    return false;
  }
  const int64_t m = state.size(2), c = state.size(3);
  return state.stride(3) == 1 && state.stride(2) == c && state.stride(1) == m * c;
}

torch::Tensor StateReadOut(const torch::Tensor& state, const torch::Tensor& query_features) {
  const char* op = "StateReadOut";
  CheckKernelDevice(op, state, {&query_features}, /*cuda_kernel=*/true);
  CheckStateAndQueries(op, state, query_features);
  TORCH_CHECK(query_features.size(2) == state.size(2), op, ": query_features must be (R, H, M) = (",
              state.size(0), ", ", state.size(1), ", ", state.size(2), "), got ",
              query_features.sizes());
  torch::NoGradGuard no_grad;
#if PERFORMER_CUDA_KERNELS
  return cuda::StateReadOutCuda(state, query_features.to(torch::kFloat).contiguous());
#else
  TORCH_CHECK(false, op, ": this build has no CUDA kernels");
#endif
}

torch::Tensor FavorProjectedReadOut(const torch::Tensor& state, const torch::Tensor& head_inputs,
                                    const torch::Tensor& projection_t, double kernel_eps) {
  const char* op = "FavorProjectedReadOut";
  CheckKernelDevice(op, state, {&head_inputs, &projection_t}, /*cuda_kernel=*/true);
  CheckStateAndQueries(op, state, head_inputs);
  const int64_t d = head_inputs.size(2), m = state.size(2);
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
