// Timing and the device copy-bandwidth reference shared by the GPU
// benchmarks (gpu_kernel_bench, gpu_decode_bench), so that both report
// against the same measurement. Needs a CUDA device.
#pragma once

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace performer::bench {

// Median seconds of `reps` timed runs after `warmup` untimed ones; the
// device is synchronised around each run.
inline double MedianDeviceSeconds(const std::function<void()>& fn, int warmup = 3, int reps = 10) {
  for (int i = 0; i < warmup; ++i) fn();
  torch::cuda::synchronize();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    torch::cuda::synchronize();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Bytes read + written per second by a device-to-device copy of 1 GiB.
inline double DeviceCopyBandwidth() {
  const auto options = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA);
  torch::Tensor src = torch::rand({int64_t{1} << 28}, options);
  torch::Tensor dst = torch::empty_like(src);
  const double seconds = MedianDeviceSeconds([&] { dst.copy_(src); });
  return 2.0 * static_cast<double>(src.nbytes()) / seconds;
}

}  // namespace performer::bench
