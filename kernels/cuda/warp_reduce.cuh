// Butterfly sum over the 32 lanes of a full warp: every lane gets the total.
// All 32 lanes must call it.
#pragma once

namespace performer::kernels::cuda {

template <typename T>
__device__ __forceinline__ T WarpSum(T value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

}  // namespace performer::kernels::cuda
