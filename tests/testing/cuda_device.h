// Tests of CUDA kernels run only where LibTorch has CUDA and a device is
// present; elsewhere they skip and say why (CI compiles them, the GPU machine
// runs them: docs/gpu.md).
#pragma once

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "kernels/kernels_info.h"

#define PERFORMER_REQUIRE_CUDA()                                                             \
  do {                                                                                       \
    if (!performer::kernels::CudaKernelsCompiled()) {                                        \
      GTEST_SKIP() << "kernels/cuda was not compiled (no nvcc at configure time)";           \
    }                                                                                        \
    if (!performer::kernels::TorchHasCuda()) {                                               \
      GTEST_SKIP() << "this LibTorch has no CUDA: CUDA kernels run on the GPU machine only " \
                      "(docs/gpu.md)";                                                       \
    }                                                                                        \
    if (!torch::cuda::is_available()) {                                                      \
      GTEST_SKIP() << "no CUDA device visible";                                              \
    }                                                                                        \
  } while (0)
