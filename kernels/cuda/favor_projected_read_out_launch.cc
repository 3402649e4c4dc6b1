#include "kernels/cuda/favor_projected_read_out_launch.h"

#include <torch/torch.h>

#include <cmath>

#include "kernels/cuda/favor_projected_read_out_cuda.h"
#include "kernels/cuda/torch_cuda.h"

namespace performer::kernels::cuda {

torch::Tensor FavorProjectedReadOutCuda(const torch::Tensor& state,
                                        const torch::Tensor& head_inputs,
                                        const torch::Tensor& projection_t, double kernel_eps) {
  const int64_t rows = state.size(0), heads = state.size(1), c = state.size(3);
  torch::Tensor out = torch::empty({rows, heads, c - 1}, head_inputs.options());
  FavorProjectedReadOutArgs a{};
  a.state = state.data_ptr<float>();
  a.state_row_stride = state.stride(0);
  a.head_inputs = head_inputs.data_ptr<float>();
  a.projection_t = projection_t.data_ptr<float>();
  a.out = out.data_ptr<float>();
  a.rows = rows;
  a.heads = heads;
  a.features = state.size(2);
  a.columns = c;
  a.head_dim = head_inputs.size(2);
  a.diag_scale = static_cast<float>(0.5 / std::sqrt(static_cast<double>(a.head_dim)));
  a.kernel_eps = static_cast<float>(kernel_eps);
  CheckLaunch(FavorProjectedReadOutForward(a, CurrentStream(state)), "FavorProjectedReadOut");
  return out;
}

}  // namespace performer::kernels::cuda
