// PERFORMER_HOST_DEVICE: __host__ __device__ under nvcc, nothing otherwise,
// for the plain C++ headers that both the host (and its tests) and the
// kernels use (the decode-step and prefill plans, std::mt19937_64).
#pragma once

#if defined(__CUDACC__)
#define PERFORMER_HOST_DEVICE __host__ __device__
#else
#define PERFORMER_HOST_DEVICE
#endif
