#include <cuda_runtime.h>

#include "kernels/cuda/launch_status.cuh"
#include "kernels/cuda/row_norm_cuda.h"
#include "kernels/cuda/row_statistics.cuh"

namespace performer::kernels::cuda {
namespace {

constexpr int kRowsPerBlock = 4;
constexpr int kThreads = kRowsPerBlock * 32;

__global__ void __launch_bounds__(kThreads) RowNormKernel(RowNormArgs a) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp;
  if (r >= a.rows) return;  // a whole warp: WarpSum's lanes stay together
  const int64_t cols = a.cols;
  const float* x = a.x + r * cols;
  if (a.kind == RowNormKind::kSquaredNorm) {
    const float squares = RowSquaredNorm(x, cols, lane);
    if (lane == 0) a.y[r] = squares;
    return;
  }
  float* y = a.y + r * cols;
  if (a.kind == RowNormKind::kLayerNorm) {
    const float2 stats = RowStatistics(x, cols, a.eps, lane);
    for (int64_t i = lane; i < cols; i += 32) {
      const float w = a.weight != nullptr ? a.weight[i] : 1.0f;
      const float b = a.bias != nullptr ? a.bias[i] : 0.0f;
      y[i] = LayerNormElement(x[i], stats, w, b);
    }
    return;
  }
  const float divisor = RowScaleNormDivisor(x, cols, a.eps, lane);
  const float g = a.scale[0];
  for (int64_t i = lane; i < cols; i += 32) y[i] = __fmul_rn(__fdiv_rn(x[i], divisor), g);
}

}  // namespace

const char* RowNormForward(const RowNormArgs& args, void* stream) {
  if (args.rows < 0 || args.cols < 1) return "row norm needs cols >= 1";
  if (args.kind == RowNormKind::kScaleNorm && args.scale == nullptr) {
    return "ScaleNorm needs its scale";
  }
  if (args.rows == 0) return nullptr;
  const int64_t blocks = (args.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > 0x7fffffff) return "too many rows for one grid";
  RowNormKernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      args);
  return LaunchError();
}

}  // namespace performer::kernels::cuda
