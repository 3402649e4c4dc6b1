// CPU kernel of kernels/skinny_linear.h (validated, contiguous float32).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

torch::Tensor SkinnyLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                  const torch::Tensor& bias);

}  // namespace performer::kernels::cpu
