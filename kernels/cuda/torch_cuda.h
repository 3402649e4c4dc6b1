// Glue between torch tensors and the raw CUDA launchers of kernels/cuda:
// the stream LibTorch is using on a device, launch-error reporting and the
// float32 / float64 dispatch of the launchers that take either.
// Only compiled when kernels/cuda is (PERFORMER_CUDA_KERNELS).
#pragma once

#include <torch/types.h>

namespace performer::kernels::cuda {

// LibTorch's current CUDA stream on the tensor's device, as a cudaStream_t
// (void* so that this header needs no CUDA include). Fails with a c10::Error
// when LibTorch has no CUDA (no CUDA tensor can exist then).
void* CurrentStream(const torch::Tensor& on_device);

// Turns a launcher's error string (nullptr on success) into a c10::Error
// that names the op.
void CheckLaunch(const char* error, const char* op);

// Calls launch(T{}) with T = double for a float64 `type`, float for float32,
// and returns its result (a launcher's error string); any other dtype is a
// c10::Error naming `op`.
template <typename Launch>
const char* DispatchFloatOrDouble(const char* op, torch::ScalarType type, Launch launch) {
  if (type == torch::kDouble) return launch(double{});
  TORCH_CHECK(type == torch::kFloat, op, ": CUDA takes float32 or float64, got ", type);
  return launch(float{});
}

}  // namespace performer::kernels::cuda
