// Random-hyperplane hashing, the first step of clustered attention.
//
//   ComputeHashes(X (..., E), planes (B, E+1)) -> int64 (...)
//
// Bit b of the code of a row x is [x . planes[b, :E] > planes[b, E]]: the
// last column of `planes` is the offset of each hyperplane (all zero gives
// sign-of-projection, i.e. cosine, hashing). B must be in [1, 63] so that the
// code is a non-negative int64. X and planes share a floating dtype (float32
// or float64). Not differentiable (codes are integers). CPU and CUDA
// (kernels/cuda/hashing_cuda.h, bit-exact with the CPU: the same summation
// order, no FMA contraction); other devices are rejected with a message.
#pragma once

#include <torch/types.h>

namespace performer::kernels {

torch::Tensor ComputeHashes(const torch::Tensor& x, const torch::Tensor& planes);

}  // namespace performer::kernels
