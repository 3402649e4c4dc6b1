// On CUDA, whether the kernels on a model's inference path compute each row
// (a token of a prompt, a sequence of a batch) with one chain of operations
// whatever the other rows of the call, as the CPU kernels always do, so that
// a token's logits are the same bits however its sequence was fed (prompt
// chunks or steps, restored or not) and whatever shares its batch
// (docs/serving.md, "The same bits"). When on:
//   * kernels::FusedLinear runs its own kernel at any number of rows (no
//     cuBLAS, no tensor cores): each output is one warp's dot product in a
//     fixed lane order;
//   * the decode step's state kernel is CudaStepKernel::kRowBlocks (one
//     block per state row, whatever the batch), for every CudaStepKernel
//     setting;
//   * the scans of kernels/linear_state_step.h run on CUDA, one launch per
//     layer whose blocks walk each state's tokens in order with the step
//     kernel's body (instead of one chunkwise prefill);
//   * kernels::WindowedRingAttention runs on CUDA;
//   * kernels::LayerNormRows, ScaleNormRows and SquaredNormRows run their
//     own kernel (a warp per row);
//   * the read-outs of kernels/state_read_out.h run (cross attention's, a
//     block per row and head).
// Models read it through core/attention/row_invariance.h. Off by
// default: the GPU then keeps its fastest kernel for each shape, and only
// rows of one call are independent of each other (docs/gpu.md).
// Process-wide, read at every call; set it before models are loaded, since
// CUDA graphs capture the kernels chosen when they are recorded.
#pragma once

#include <c10/core/Device.h>

namespace performer::kernels {

void SetCudaRowInvariance(bool enabled);
bool CudaRowInvariance();

// Whether the kernels compute each row the same way whatever the other rows
// on `device`: always on the CPU; on CUDA under CudaRowInvariance() when this
// build compiled kernels/cuda.
bool RowInvariantOn(const c10::Device& device);

// Sets it for its lifetime, then restores the setting before (tests and
// benchmarks that compare the two).
class ScopedCudaRowInvariance {
 public:
  explicit ScopedCudaRowInvariance(bool enabled) : previous_(CudaRowInvariance()) {
    SetCudaRowInvariance(enabled);
  }
  ~ScopedCudaRowInvariance() { SetCudaRowInvariance(previous_); }
  ScopedCudaRowInvariance(const ScopedCudaRowInvariance&) = delete;
  ScopedCudaRowInvariance& operator=(const ScopedCudaRowInvariance&) = delete;

 private:
  bool previous_;
};

}  // namespace performer::kernels
