#include "kernels/cuda/state_read_out_launch.h"

#include <torch/torch.h>

#include <cmath>

#include "kernels/cuda/state_read_out_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {
namespace {

// The launch for queries `inputs` [rows, heads, D]: features where
// projection_t is undefined, FAVOR+ head inputs otherwise.
torch::Tensor Launch(const torch::Tensor& state, const torch::Tensor& inputs,
                     const torch::Tensor& projection_t, double kernel_eps) {
  const int64_t rows = state.size(0), heads = state.size(1), c = state.size(3);
  torch::Tensor out = torch::empty({rows, heads, c - 1}, inputs.options());
  StateReadOutArgs a{};
  a.state = state.data_ptr<float>();
  a.state_row_stride = state.stride(0);
  a.head_inputs = inputs.data_ptr<float>();
  a.projection_t = projection_t.defined() ? projection_t.data_ptr<float>() : nullptr;
  a.out = out.data_ptr<float>();
  a.rows = rows;
  a.heads = heads;
  a.features = state.size(2);
  a.columns = c;
  a.head_dim = inputs.size(2);
  a.diag_scale = static_cast<float>(0.5 / std::sqrt(static_cast<double>(a.head_dim)));
  a.kernel_eps = static_cast<float>(kernel_eps);
  CheckLaunch(StateReadOutForward(a, CurrentStream(state)), "StateReadOut");
  return out;
}

}  // namespace

torch::Tensor StateReadOutCuda(const torch::Tensor& state, const torch::Tensor& query_features) {
  return Launch(state, query_features, torch::Tensor(), 0.0);
}

torch::Tensor FavorProjectedReadOutCuda(const torch::Tensor& state,
                                        const torch::Tensor& head_inputs,
                                        const torch::Tensor& projection_t, double kernel_eps) {
  return Launch(state, head_inputs, projection_t, kernel_eps);
}

}  // namespace performer::kernels::cuda
