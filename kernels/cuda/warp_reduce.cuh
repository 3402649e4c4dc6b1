// Butterfly reductions over the 32 lanes of a full warp: every lane gets the
// result. All 32 lanes must call them.
#pragma once

namespace performer::kernels::cuda {

template <typename T>
__device__ __forceinline__ T WarpSum(T value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

__device__ __forceinline__ float WarpMax(float value) {
  for (int offset = 16; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

}  // namespace performer::kernels::cuda
