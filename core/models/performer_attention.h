// performer-pytorch's Attention (SelfAttention / CrossAttention,
// docs/reference/performer-pytorch.md §1.3, §5): to_q/to_k/to_v projections,
// the first heads - local_heads heads through FastAttention (rotary on q and k
// for self attention when a table row is given), the last local_heads heads
// through WindowedLocalAttention, to_out.
//
// Masks: for global heads only v is zeroed where the key mask is false (keys
// still enter the normaliser and the stabiliser: padding is not neutral, §9.2
// of the same document); local heads mask keys. Cross attention uses
// context_mask only and has neither rotary nor local heads.
//
// Dropout (attn_dropout) acts in training mode only, where the reference
// has it: on the output of to_out and on the local heads' attention weights.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <vector>

#include "core/attention/linear_rows.h"
#include "core/attention/rotary.h"
#include "core/attention/windowed_local_attention.h"
#include "core/models/decode_step_options.h"
#include "core/models/fast_attention.h"
#include "core/recurrent/slot_state.h"

namespace performer::models {

struct PerformerAttentionOptions {
  int64_t dim = 0;
  bool causal = false;
  int64_t heads = 8;
  int64_t dim_head = 64;
  int64_t local_heads = 0;
  int64_t local_window_size = 256;
  std::optional<int64_t> nb_features;
  bool generalized_attention = false;
  KernelFunction kernel_fn = KernelFunction::kReLU;
  bool no_projection = false;
  bool qkv_bias = false;
  bool attn_out_bias = true;
  double dropout = 0.0;  // training mode only
  bool cross = false;    // CrossAttention: requires a context
};

class PerformerAttentionImpl : public torch::nn::Module {
 public:
  explicit PerformerAttentionImpl(const PerformerAttentionOptions& options);

  // The decode state one sequence keeps (core/recurrent/slot_state.h), in
  // this order: self attention, the global heads' FastAttention state
  // (FastAttentionImpl::SlotStateSpec) and then, with local heads, the
  // ring of their last 2 windows' raw keys and values [lh, 2w, d] each
  // (entry = position mod 2w); cross attention, the constant summary of the
  // context [h, m, d + 1] (m = feature width).
  std::vector<SlotTensorSpec> SlotStateSpec() const;

  // x [b, n, dim]. Self attention: rotary rows [n, dim_head] or undefined,
  // mask [b, n] bool or undefined. Cross attention: context [b, m, dim],
  // context_mask [b, m] or undefined. When `capture` is given (self
  // attention, causal: the SlotStateSpec tensors of b rows), it is filled
  // with the decoding state after the n positions.
  torch::Tensor forward(const torch::Tensor& x, const InterleavedRotary& rotary,
                        const torch::Tensor& mask, const torch::Tensor& context,
                        const torch::Tensor& context_mask, torch::TensorList capture = {});

  // One causal self-attention step: x [B, dim] at positions [B]; rotary
  // rows [B, dim_head] (pre-interleaved) or undefined; `state` the
  // SlotStateSpec tensors of the B rows, updated in place.
  torch::Tensor Step(const torch::Tensor& x, const InterleavedRotary& rotary,
                     const torch::Tensor& positions, torch::TensorList state);

  // Several consecutive positions of ONE sequence (chunked prefill): x [C, dim]
  // at positions [C] (only positions[0] is read, by local heads: on the
  // host it costs no device synchronisation, and PerformerLM passes it
  // there), rotary rows [C, dim_head] or undefined; `state` holds
  // one row. The projections run on all C rows at once. On the CPU the
  // heads then feed the tokens in order with the steps' own operations
  // (FastAttention::Scan, WindowedLocalAttention::Extend), so every token
  // gets the bits Step() would give it; elsewhere the global heads continue
  // their state with one chunkwise prefill (FastAttention::Extend). Returns
  // [C, dim].
  torch::Tensor Extend(const torch::Tensor& x, const InterleavedRotary& rotary,
                       const torch::Tensor& positions, torch::TensorList state);

  // Converts the layer's weights to options.weight_dtype
  // (core/attention/linear_weights.h) and concatenates the q/k/v weights for
  // Step and FusedStep (one product instead of three); to_q, to_k and to_v
  // become views of the concatenation, so the weights are held once. Call
  // after the weights are loaded.
  void PrepareForDecoding(const DecodeStepOptions& options = {});
  // x + Step(norm(x)): Step with `norm` (the norm_* fields of a
  // FusedLinearOptions, or none) fused into the q/k/v projection
  // and the residual into the output projection (kernels/fused_linear.h);
  // with `chunk`, x + Extend(norm(x)) the same way. Needs
  // PrepareForDecoding.
  torch::Tensor FusedStep(const torch::Tensor& x, const FusedLinearOptions& norm,
                          const InterleavedRotary& rotary, const torch::Tensor& positions,
                          torch::TensorList state, bool chunk = false);

  // PrepareForDecoding's part for cross attention: the scaled projection
  // that CrossStep's read-out takes (FastAttention::PrepareForDecoding).
  void PrepareCrossForDecoding();
  // Cross attention: the constant summary of a context [b, m, dim] -> [b, h, m', d + 1].
  torch::Tensor SummarizeContext(const torch::Tensor& context, const torch::Tensor& context_mask);
  // Cross attention step: x [B, dim] against summaries [B, h, m', d + 1].
  torch::Tensor CrossStep(const torch::Tensor& x, const torch::Tensor& summary);

  // Appends the tensors PrepareForDecoding made (for weight accounting).
  void AppendDecodeTensors(std::vector<torch::Tensor>* out) const {
    out->insert(out->end(), {qkv_weight_, qkv_bias_, qkv_scales_});
  }

  int64_t global_heads() const { return options_.heads - options_.local_heads; }
  const PerformerAttentionOptions& options() const { return options_; }

 private:
  // q/k/v of rows x [B, dim] -> [B, 3, h, d].
  torch::Tensor ProjectQkv(const torch::Tensor& x);
  // The global heads' queries and keys [B, 2 gh, d], rotated.
  torch::Tensor GlobalQueriesKeys(const torch::Tensor& qkv, const InterleavedRotary& rotary) const;
  // The heads of Extend on projected rows qkv [C, 3, h, d] -> [C, h, d].
  torch::Tensor ExtendMix(const torch::Tensor& qkv, const InterleavedRotary& rotary,
                          const torch::Tensor& positions, torch::TensorList state);
  // One position per row against `state` -> [B, h, d] (before to_out).
  torch::Tensor Recur(const torch::Tensor& qkv, const torch::Tensor& qk,
                      const torch::Tensor& positions, torch::TensorList state);
  // The global heads' part of a state list, and the local heads' ring.
  torch::TensorList FastState(torch::TensorList state) const;
  const torch::Tensor& RingKeys(torch::TensorList state) const;
  const torch::Tensor& RingValues(torch::TensorList state) const;
  // [b, n, h*d] -> [b, h, n, d]
  torch::Tensor SplitHeads(const torch::Tensor& t) const;
  torch::Tensor MergeHeads(const torch::Tensor& t) const;

  PerformerAttentionOptions options_;
  FastAttention fast_attention_{nullptr};
  WindowedLocalAttention local_attn_{nullptr};
  torch::nn::Linear to_q_{nullptr}, to_k_{nullptr}, to_v_{nullptr}, to_out_{nullptr};
  // PrepareForDecoding: the concatenated q/k/v weight, bias and int8
  // scales, and the output projection's int8 scales.
  torch::Tensor qkv_weight_, qkv_bias_, qkv_scales_, out_scales_;
  size_t fast_state_tensors_ = 0;  // of the global heads, first in the state
};
TORCH_MODULE(PerformerAttention);

}  // namespace performer::models
