// Torch-facing launch of the CUDA hyperplane hashing
// (kernels/cuda/hashing_cuda.h): X (rows, E) and planes (bits, E + 1) of one
// dtype (float32 or float64), checked by kernels/hashing.cc, on one CUDA
// device -> int64 codes (rows,). Inputs are made contiguous here.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

torch::Tensor ComputeHashesCuda(const torch::Tensor& x, const torch::Tensor& planes);

}  // namespace performer::kernels::cuda
