// y = x W^T + b for rows x [B, in], as inference needs it: the projections
// of attention layers and the feed-forwards of every model, in decode steps
// and prompts alike. Float32 CPU rows use kernels::SkinnyLinear at any B:
// each output is one dot product in a fixed order, so a row's result is the
// same bits whatever the other rows (a prompt's tokens, a step's batch),
// which sgemm does not promise (and OpenBLAS's packing of W costs several
// times the product at batch 1). Elsewhere small batches use one gemv per
// row and larger ones W x^T. A bfloat16 or int8 weight
// (core/attention/linear_weights.h), and on CUDA where RowInvariantOn the
// device (core/attention/row_invariance.h) any weight it takes, goes to
// kernels::FusedLinear at any number of rows. Returns a contiguous [B, out].
#pragma once

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include "kernels/fused_linear.h"

namespace performer {

torch::Tensor LinearRows(const torch::nn::Linear& layer, const torch::Tensor& x);

// layer(x) for x [..., in] as the full forward needs it. Without autograd
// (inference, no-grad) through LinearRows, so that a row's result does not
// depend on the others; with it the module's own forward.
// A layer with compact weights takes LinearRows at any number of rows.
torch::Tensor ApplyLinear(const torch::nn::Linear& layer, const torch::Tensor& x);
// layer->forward(x) with float32 weights (the same operations, bit for bit);
// a layer with compact weights as ApplyLinear. For the library's modules
// that also train.
torch::Tensor ForwardLinear(const torch::nn::Linear& layer, const torch::Tensor& x);
// Same as LinearRows with a bare weight [out, in] (tied embeddings, fused
// projections) and bias; `scales` with an int8 weight.
torch::Tensor LinearRows(const torch::Tensor& weight, const torch::Tensor& bias,
                         const torch::Tensor& x, const torch::Tensor& scales = {});

// The decode step's projection with its norm, activation and residual fused
// in (kernels/fused_linear.h): the entry point models use for it.
using kernels::FusedActivation;
using kernels::FusedLinearOptions;
// GELU by whole rows, a row's bits the same whatever the others (inference).
using kernels::GeluRows;
inline torch::Tensor FusedLinearRows(const torch::Tensor& x, const torch::Tensor& weight,
                                     const FusedLinearOptions& options) {
  return kernels::FusedLinear(x, weight, options);
}

}  // namespace performer
