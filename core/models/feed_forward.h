// performer-pytorch's FeedForward (docs/reference/performer-pytorch.md §4.6):
// w2(dropout(GELU(w1 x))), or with GLU w2(dropout(GELU(a) * b)) where
// [a, b] = w1 x split in halves. GELU is the exact erf form; dropout (ff_dropout) acts
// in training mode only; ff_chunks only splits the sequence and has no numeric
// effect, so it is not modelled.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

#include "core/attention/linear_rows.h"
#include "core/models/decode_step_options.h"

namespace performer::models {

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, int64_t mult, bool glu, double dropout = 0.0);
  // Position-wise: x [..., dim] -> [..., dim].
  torch::Tensor forward(const torch::Tensor& x);
  // The same for rows x [B, dim] (decode step; see linear_rows.h).
  torch::Tensor Step(const torch::Tensor& x);

  // Converts w1 and w2 to options.weight_dtype
  // (core/models/decode_step_options.h) and readies FusedStep.
  void PrepareForDecoding(const DecodeStepOptions& options);
  // x + Step(norm(x)) for rows x [B, dim], with `norm` (the norm_* fields of
  // a FusedLinearOptions, or none) fused into w1 and the residual
  // into w2 (kernels/fused_linear.h). Needs PrepareForDecoding.
  torch::Tensor FusedStep(const torch::Tensor& x, const FusedLinearOptions& norm);

 private:
  torch::Tensor Activate(const torch::Tensor& h) const;

  bool glu_;
  double dropout_;
  torch::nn::Linear w1_{nullptr}, w2_{nullptr};
  bool prepared_ = false;                // PrepareForDecoding
  torch::Tensor w1_scales_, w2_scales_;  // PrepareForDecoding, int8 weights
};
TORCH_MODULE(FeedForward);

}  // namespace performer::models
