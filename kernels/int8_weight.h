// A float32 weight matrix quantized to the int8 format FusedLinear takes
// (kernels/cpu/weight_formats.h: symmetric, one float32 scale per block of 32
// input columns), as torch tensors.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

struct Int8Weight {
  torch::Tensor weight;  // (out, in) int8
  torch::Tensor scales;  // (out, Int8BlocksPerRow(in)) float32
};

// weight: (out, in) float32 on the CPU. Throws c10::Error naming the problem
// when the weight is on another device, has another shape or dtype, or holds a
// value that is not finite.
Int8Weight QuantizeInt8Weight(const torch::Tensor& weight);

}  // namespace performer::kernels
