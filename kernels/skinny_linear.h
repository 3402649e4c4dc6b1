// y = x W^T + b for a few rows (the decode step's projections):
// x (B, K), W (O, K), b (O,) or undefined -> (B, O); float32, CPU.
//
// Blocks of 4 weight rows stay in L1 while every row of x passes over them,
// so W is streamed from memory once per call whatever B is, and nothing is
// packed. OpenBLAS's sgemm packs W on every call, which dominates at these
// shapes (decode_bench, B=32, K=512, O=2048: 1.5 ms vs 0.87 ms here). Each
// output is one dot product in a fixed order, so a row's result does not
// depend on the other rows of the batch. Not differentiable.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor SkinnyLinear(const torch::Tensor& x, const torch::Tensor& weight,
                           const torch::Tensor& bias = {});

// True when SkinnyLinear has a kernel for these operands (CPU float32, 2-D).
bool SkinnyLinearSupported(const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace performer::kernels
