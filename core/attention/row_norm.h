// The norms of the library's layers on each row of x [..., dim], as
// inference needs them (kernels/row_norm.h): on the CPU ATen's ops, which
// compute each row alone; on CUDA where RowInvariantOn the device
// (core/attention/row_invariance.h) a kernel that does so too, so that a
// token's norm is the same bits whatever shares its call.
#pragma once

#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include "kernels/row_norm.h"

namespace performer {

// norm(x) for a LayerNorm over the last dimension.
torch::Tensor LayerNormRows(const torch::nn::LayerNorm& norm, const torch::Tensor& x);

// x / max(||x||_2, eps) * g over the last dimension (performer-pytorch's
// ScaleNorm).
using kernels::ScaleNormRows;
// ||x||_2^2 over the last dimension, kept with size 1 (the Favor feature
// map's).
using kernels::SquaredNormRows;

}  // namespace performer
