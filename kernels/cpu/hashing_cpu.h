// CPU implementation of ComputeHashes (kernels/hashing.h). Expects checked,
// contiguous inputs: X (M, E), planes (B, E+1) of the same floating dtype.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

// Returns int64 codes of shape (M,).
torch::Tensor ComputeHashesCpu(const torch::Tensor& x, const torch::Tensor& planes);

}  // namespace performer::kernels::cpu
