// Torch-facing launch of the CUDA read-out (kernels/cuda/
// favor_projected_read_out_cuda.h): tensors checked by kernels/
// favor_projected_read_out.cc, which calls it (head_inputs and projection_t
// contiguous float32; the state's last three dimensions contiguous).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor FavorProjectedReadOutCuda(const torch::Tensor& state,
                                        const torch::Tensor& head_inputs,
                                        const torch::Tensor& projection_t, double kernel_eps);

}  // namespace performer::kernels::cuda
