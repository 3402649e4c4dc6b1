// Torch-facing launches of the CUDA read-out (kernels/cuda/
// state_read_out_cuda.h): tensors checked by kernels/state_read_out.cc, which
// calls them (head_inputs, query_features and projection_t contiguous
// float32; the state's last three dimensions contiguous).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor StateReadOutCuda(const torch::Tensor& state, const torch::Tensor& query_features);
torch::Tensor FavorProjectedReadOutCuda(const torch::Tensor& state,
                                        const torch::Tensor& head_inputs,
                                        const torch::Tensor& projection_t, double kernel_eps);

}  // namespace performer::kernels::cuda
