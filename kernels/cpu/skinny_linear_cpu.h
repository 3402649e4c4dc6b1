// CPU kernel of kernels/skinny_linear.h (validated, contiguous float32).
#pragma once

#include <torch/types.h>

#include <algorithm>
#include <cstdint>

namespace performer::kernels::cpu {

// Blocks of 4 weight rows per parallel task for a layer of `in` columns
// and `rows` rows of x: enough work per task that each thread streams a
// sizeable slice of the weights (the skinny kernels over any weight
// format), and every thread has some when the rows are many.
inline int64_t SkinnyBlockGrain(int64_t in, int64_t rows = 1) {
  return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, in * std::max<int64_t>(1, rows)));
}

torch::Tensor SkinnyLinearForward(const torch::Tensor& x, const torch::Tensor& weight,
                                  const torch::Tensor& bias);

}  // namespace performer::kernels::cpu
