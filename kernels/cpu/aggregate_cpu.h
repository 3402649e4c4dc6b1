// CPU implementations of Aggregate and Broadcast (kernels/aggregate.h).
// Expect checked, contiguous inputs: groups int64, factors of X's dtype.
#pragma once

#include <torch/types.h>

namespace performer::kernels::cpu {

torch::Tensor AggregateCpu(const torch::Tensor& x, const torch::Tensor& groups,
                           const torch::Tensor& factors);

torch::Tensor BroadcastCpu(const torch::Tensor& y, const torch::Tensor& groups,
                           const torch::Tensor& factors);

}  // namespace performer::kernels::cpu
