// performer-pytorch's Performer, the layer stack
// (docs/reference/performer-pytorch.md §1.2, §4): depth (attention,
// feed-forward) pairs, with an extra (cross attention, feed-forward) pair after
// each when cross_attend. Sequential: x += f(x); x += g(x). Reversible
// (inference form): x1 = x2 = x; y1 = x1 + f(x2); y2 = x2 + g(y1); output
// x1 + x2. State-dict names: net.layers.<i>.{0,1}.* or
// net.blocks.<i>.{f,g}.net.*.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/models/branch.h"
#include "core/models/performer_config.h"
#include "core/recurrent/slot_state.h"

namespace performer::models {

// Optional per-branch outputs ("layers.<i>.attn_branch" / "ff_branch").
using DebugTrace = std::map<std::string, torch::Tensor>;

class PerformerStackImpl : public torch::nn::Module {
 public:
  // Uses the PerformerLM keywords (PerformerLM passes its qkv/out biases).
  explicit PerformerStackImpl(const PerformerLMConfig& config);

  // The decode state of one sequence, as the slot pool's layers
  // (core/recurrent/state_pool.h): one entry per branch, in the order
  // pair 0's attention branch, pair 0's feed-forward branch, pair 1's ...
  // (BranchImpl::SlotStateSpec; a feed-forward branch without token shift
  // keeps nothing).
  std::vector<std::vector<SlotTensorSpec>> SlotStateSpecs() const;

  // x [b, n, dim]. `capture` (b rows of a pool of SlotStateSpecs) receives
  // the incremental state after the n positions (causal self attention,
  // token shift; cross summaries are set by InitCross).
  torch::Tensor forward(const torch::Tensor& x, const BranchInputs& in,
                        const std::vector<SlotRows>* capture = nullptr,
                        DebugTrace* trace = nullptr);

  // x [B, dim] at positions [B] -> [B, dim]; `state` B rows of the pool,
  // updated in place (not their positions).
  torch::Tensor Step(const torch::Tensor& x, const InterleavedRotary& rotary,
                     const torch::Tensor& positions, const std::vector<SlotRows>& state);
  // C consecutive positions of one sequence (state: one row) -> [C, dim].
  torch::Tensor Extend(const torch::Tensor& x, const InterleavedRotary& rotary,
                       const torch::Tensor& positions, const std::vector<SlotRows>& state);

  // Prepares each branch's decode weights (BranchImpl::PrepareForDecoding);
  // with `fused`, Step then fuses the branches that can
  // (BranchImpl::fuses_step) in a sequential (not reversible) stack.
  void PrepareForDecoding(const DecodeStepOptions& options, bool fused);
  // Appends the tensors PrepareForDecoding made (for weight accounting).
  void AppendDecodeTensors(std::vector<torch::Tensor>* out) const;

  // Folds a context [b, m, dim] into the cross-attention summaries of `state` rows [b].
  void InitCross(const torch::Tensor& context, const torch::Tensor& context_mask,
                 const std::vector<SlotRows>& state);

  int64_t num_pairs() const { return static_cast<int64_t>(pairs_.size()); }

 private:
  // The pairs' residual wiring (sequential or reversible) around one
  // incremental branch call, `Step` or `Extend`.
  using BranchCall = torch::Tensor (BranchImpl::*)(const torch::Tensor&, const InterleavedRotary&,
                                                   const torch::Tensor&, torch::TensorList);
  torch::Tensor Incremental(BranchCall call, const torch::Tensor& x,
                            const InterleavedRotary& rotary, const torch::Tensor& positions,
                            const std::vector<SlotRows>& state);
  // The fused wiring of Step (chunk false) and Extend (chunk true).
  torch::Tensor FusedLayers(const torch::Tensor& x, const InterleavedRotary& rotary,
                            const torch::Tensor& positions, const std::vector<SlotRows>& state,
                            bool chunk);
  // Checks that `state` has one entry per branch.
  void CheckState(const std::vector<SlotRows>& state) const;
  PerformerLMConfig config_;
  std::vector<std::pair<Branch, Branch>> pairs_;
  bool fused_step_ = false;  // PrepareForDecoding
};
TORCH_MODULE(PerformerStack);

}  // namespace performer::models
