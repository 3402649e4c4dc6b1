// The error of a kernel's output against its reference on the output's own
// scale: max |got - expected| / max |expected| (0 for empty outputs), for
// tests whose tolerances are fractions of that scale (low-precision inputs,
// long sums).
#pragma once

#include <torch/torch.h>

#include <algorithm>

namespace performer::testing {

inline double ScaledError(const torch::Tensor& got, const torch::Tensor& expected) {
  if (expected.numel() == 0) return 0.0;
  const double scale = std::max(expected.abs().max().item<double>(), 1e-12);
  return (got - expected).abs().max().item<double>() / scale;
}

}  // namespace performer::testing
