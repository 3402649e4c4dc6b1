// Glue between torch tensors and the raw CUDA launchers of kernels/cuda:
// the stream LibTorch is using on a device, and launch-error reporting.
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

}  // namespace performer::kernels::cuda
