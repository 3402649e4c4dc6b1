// One residual branch of the Performer stack
// (docs/reference/performer-pytorch.md §2.1, §4.4, §4.5): a wrapper
// (PreLayerNorm, PreScaleNorm or ReZero) around an optional token shift around
// the inner module (self attention, cross attention or the feed-forward). The
// module tree reproduces the reference's state-dict names:
//   <branch>.norm.* | <branch>.g,  inner under <branch>.fn[.fn][.fn]
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

#include "core/models/feed_forward.h"
#include "core/models/performer_attention.h"
#include "core/recurrent/slot_state.h"

namespace performer::models {

enum class BranchNorm { kLayerNorm, kScaleNorm, kReZero };

struct BranchInputs {
  InterleavedRotary rotary;    // self attention: rows of positions 0..n-1
  torch::Tensor mask;          // [b, n] bool or undefined
  torch::Tensor context;       // cross attention
  torch::Tensor context_mask;  // cross attention
};

class BranchImpl : public torch::nn::Module {
 public:
  // Exactly one of attention / feed_forward is non-null.
  BranchImpl(int64_t dim, BranchNorm norm, bool shift_tokens, bool causal,
             PerformerAttention attention, FeedForward feed_forward);

  // The decode state one sequence keeps in this branch
  // (core/recurrent/slot_state.h): the attention's (PerformerAttentionImpl::
  // SlotStateSpec), then with token shift the previous position's
  // normalised shifted piece [shift_piece()]. Empty for a feed-forward
  // branch without token shift.
  std::vector<SlotTensorSpec> SlotStateSpec() const;

  // x [b, n, dim] -> branch output (before the residual add). `capture`
  // (the SlotStateSpec tensors of b rows) receives the decoding state after
  // the last position; a cross-attention branch leaves its summary to
  // PerformerAttentionImpl::SummarizeContext.
  torch::Tensor forward(const torch::Tensor& x, const BranchInputs& in,
                        torch::TensorList capture = {});

  // Incremental forms on x [B, dim], with `state` the SlotStateSpec tensors
  // of the B rows, updated in place.
  torch::Tensor Step(const torch::Tensor& x, const InterleavedRotary& rotary,
                     const torch::Tensor& positions, torch::TensorList state);
  // C consecutive positions of one sequence, x [C, dim]; `state` holds one
  // row (see PerformerAttentionImpl::Extend).
  torch::Tensor Extend(const torch::Tensor& x, const InterleavedRotary& rotary,
                       const torch::Tensor& positions, torch::TensorList state);

  // Whether StepWithResidual fuses this branch: a LayerNorm branch without
  // token shift around self attention or the feed-forward.
  bool fuses_step() const;
  // Makes the inner module's decode weights (core/models/decode_step_options.h).
  void PrepareForDecoding(const DecodeStepOptions& options);
  // x + Step(x) for a branch that fuses_step(), its norm and residual fused
  // into the projections (kernels/fused_linear.h); with `chunk`, x +
  // Extend(x) the same way. Needs PrepareForDecoding.
  torch::Tensor StepWithResidual(const torch::Tensor& x, const InterleavedRotary& rotary,
                                 const torch::Tensor& positions, torch::TensorList state,
                                 bool chunk = false);
  // Appends the tensors PrepareForDecoding made (for weight accounting).
  void AppendDecodeTensors(std::vector<torch::Tensor>* out) const;

  bool is_attention() const { return !attention_.is_empty(); }
  bool is_cross() const { return is_attention() && attention_->options().cross; }
  bool shifts_tokens() const { return shift_tokens_; }
  PerformerAttention& attention() { return attention_; }
  const PerformerAttention& attention() const { return attention_; }
  // Width of the piece a causal token shift carries to the next position.
  int64_t shift_piece() const { return dim_ / static_cast<int64_t>(shifts_.size()); }

 private:
  torch::Tensor Normalize(const torch::Tensor& x);
  torch::Tensor Shift(const torch::Tensor& x, const torch::Tensor& mask) const;
  torch::Tensor Inner(const torch::Tensor& x, const BranchInputs& in, torch::TensorList capture);
  // The attention's part of a state list (all but the shifted piece).
  torch::TensorList AttentionState(torch::TensorList state) const;

  int64_t dim_;
  BranchNorm norm_kind_;
  bool shift_tokens_;
  std::vector<int64_t> shifts_;
  torch::nn::LayerNorm norm_{nullptr};
  torch::Tensor g_;
  PerformerAttention attention_{nullptr};
  FeedForward feed_forward_{nullptr};
};
TORCH_MODULE(Branch);

}  // namespace performer::models
