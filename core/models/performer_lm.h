// performer-pytorch's PerformerLM (docs/reference/performer-pytorch.md §1.1,
// §3): token embedding + absolute positional embedding, the Performer stack
// (rotary rows of layer_pos_emb for global heads when rotary_position_emb),
// final LayerNorm, and to_out (or the tied token embedding). emb_dropout,
// ff_dropout and attn_dropout act in training mode only
// (torch::nn::Module::train()); the projection matrices are buffers, redrawn
// only on request (see core/models/initialization.h; the trainer does it as the
// reference's ProjectionUpdater does).
//
// Besides the full forward it has the incremental form used for decoding:
// Prefill (a full forward that also leaves each row's constant-size state
// in rows of a slot pool, core/recurrent/state_pool.h) and Step (one token
// per row against that state).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <optional>
#include <vector>

#include "core/models/decode_step_options.h"
#include "core/models/performer_config.h"
#include "core/models/performer_stack.h"
#include "core/models/positional_embedding.h"
#include "core/recurrent/state_pool.h"

namespace performer::models {

struct LMForwardOptions {
  torch::Tensor mask;          // [b, n] bool, true = real token
  torch::Tensor context;       // [b, m, dim] (decoder with cross_attend)
  torch::Tensor context_mask;  // [b, m] bool
  bool return_encodings = false;
  DebugTrace* trace = nullptr;  // "embed", "layers.<i>.{attn,ff}_branch"
  // Rows [b] of a pool of SlotStateSpecs(): the decoding state after the n
  // positions (positions included).
  const std::vector<SlotRows>* capture = nullptr;
};

class PerformerLMImpl : public torch::nn::Module {
 public:
  explicit PerformerLMImpl(const PerformerLMConfig& config);

  // tokens [b, n] int64 -> logits [b, n, num_tokens] (or encodings [b, n, dim]).
  // TORCH_CHECKs n <= max_seq_len like the reference.
  torch::Tensor forward(const torch::Tensor& tokens, const LMForwardOptions& options = {});

  // One token per row: tokens [B] int64 -> logits [B, num_tokens]. `state`
  // (B rows of a pool of SlotStateSpecs()) is advanced in place, positions
  // included.
  torch::Tensor Step(const torch::Tensor& tokens, const std::vector<SlotRows>& state);

  // Chunked prefill: feeds tokens [C] int64 to the ONE sequence of `state`
  // (one row; a reset row is an empty sequence) at its next C positions and
  // returns the logits [num_tokens] after the last. The same recurrence as
  // C Steps, with the projections and feed-forwards run on all C positions
  // at once; on the CPU each token's logits and the state after it are the
  // bits C Steps give, however the tokens are split between calls.
  // `start`: the sequence's position (state.positions) when the caller keeps
  // it on the host, so that local heads, which need it as a number, do not
  // read it back from the device (a synchronisation on a GPU); without it,
  // it is read once here.
  torch::Tensor Extend(const torch::Tensor& tokens, const std::vector<SlotRows>& state,
                       std::optional<int64_t> start = std::nullopt);

  // Cross-attention summaries of a context for `state` rows (decoder only).
  void InitCross(const torch::Tensor& context, const torch::Tensor& context_mask,
                 const std::vector<SlotRows>& state);

  // The decode state of one sequence, layer by layer of the pool
  // (PerformerStackImpl::SlotStateSpecs).
  std::vector<std::vector<SlotTensorSpec>> SlotStateSpecs() const;
  // A pool of `rows` empty sequences where the weights are, in their dtype.
  StatePool AllocateState(int64_t rows) const;

  // Converts the linear layers to options.weight_dtype, precomputes what
  // Step reuses (interleaved rotary tables, fused q/k/v weights) and sets how
  // it computes (core/models/decode_step_options.h, for the device the
  // weights are on: a fused step fuses the final norm into the output head
  // too). Call once after the weights are loaded; with float32 weights Step
  // works without it, only slower.
  void PrepareForDecoding(const DecodeStepOptions& options = {});
  // Appends the tensors PrepareForDecoding made (for weight accounting:
  // models::DistinctStorageBytes).
  void AppendDecodeTensors(std::vector<torch::Tensor>* out) const;

  const PerformerLMConfig& config() const { return config_; }
  const torch::nn::Embedding& token_emb() const { return token_emb_; }
  // Shares the token embedding of another model (PerformerEncDec tie_token_embeds).
  void TieTokenEmbedding(const torch::nn::Embedding& other);

 private:
  // The final norm and the output projection of rows x [B, dim], as Step
  // runs them (fused with compact weights).
  torch::Tensor StepHead(const torch::Tensor& x);
  torch::Tensor Logits(const torch::Tensor& encodings);

  PerformerLMConfig config_;
  torch::nn::Embedding token_emb_{nullptr};
  PositionalEmbedding pos_emb_{nullptr};
  torch::Tensor layer_pos_emb_;  // [max_seq_len, dim_head] when rotary
  InterleavedRotary rotary_;     // PrepareForDecoding
  PerformerStack performer_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  torch::nn::Linear to_out_{nullptr};
  // PrepareForDecoding, when the step is fused: the output head in the
  // weight dtype (a copy of a tied embedding, else to_out's weight).
  torch::Tensor step_head_weight_, step_head_scales_;
};
TORCH_MODULE(PerformerLM);

}  // namespace performer::models
