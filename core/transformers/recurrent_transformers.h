// Recurrent (one time step at a time) transformer layers, as
// fast-transformers' recurrent.transformers: the same equations, submodule
// names and state-dict keys as the batch layers of transformers.h, with the
// recurrent attention layers. With the same weights, a causal mask and full
// length masks (and frozen feature maps), stepping x[:, 0], x[:, 1], ...
// through the recurrent twin reproduces the batch output row by row.
//
// RecurrentTransformerEncoderLayer(attention, d_model, d_ff = 4*d_model,
//     dropout = 0.1, activation = "relu"), forward(x (N, d_model), state):
//   x = norm1(x + dropout(attention(x, x, x, state)))
//   return norm2(x + dropout(linear2(dropout(act(linear1(x))))))
//
// RecurrentTransformerDecoderLayer(self_attention, cross_attention, d_model,
//     d_ff, dropout, activation), forward(x (N, d_model), memory (N, S, d_mem),
//     memory_length_mask = all-S, state):
//   x = norm1(x + dropout(self_attention(x, x, x, state.self)))
//   x = norm2(x + dropout(cross_attention(x, memory, memory, memory_length_mask, state.cross)))
//   return norm3(x + dropout(linear2(dropout(act(linear1(x))))))
// The cross attention always sees the whole memory (no memory attention
// mask, as in the reference). The memory is projected and folded into the
// cross state on the first step; afterwards `memory` may be undefined: the
// default memory_length_mask then takes S from a cross full state (whose
// softmax reads the mask at every step), and is an empty N x 0 mask for other
// cross states, which do not read it after the first step.
//
// RecurrentTransformerEncoder / RecurrentTransformerDecoder(layers,
// norm_layer = none) step every layer and apply the optional final
// LayerNorm ("norm"). Model states (the reference's lists):
//   RecurrentEncoderState   layers[i] = layer i's self-attention state
//   RecurrentDecoderState   layers[i] = {self, cross} of layer i
// An empty `layers` vector means a new sequence; forward() fills it and
// updates it in place (element tensors may be mutated in place too, see the
// recurrent linear attention). A state with another number of layers is an
// error. The reference's deprecated `memory` alias of `state` and its
// IntermediateOutput events are not ported.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/introspection.h"
#include "core/masks.h"
#include "core/recurrent/recurrent_attention.h"
#include "core/recurrent/recurrent_attention_layer.h"
#include "core/transformers/transformers.h"

namespace performer {

// The state of one RecurrentTransformerDecoderLayer: its self attention's
// and its cross attention's.
struct RecurrentDecoderLayerState {
  AttentionState self;
  AttentionState cross;
};

// One self-attention state per encoder layer; empty = new sequence.
struct RecurrentEncoderState {
  std::vector<AttentionState> layers;
};

// One {self, cross} pair per decoder layer; empty = new sequence.
struct RecurrentDecoderState {
  std::vector<RecurrentDecoderLayerState> layers;
};

// The state's tensors by the golden fixtures' names (final_state.*):
// "layers.<i>.<j>" for an encoder, "layers.<i>.self.<j>" and
// "layers.<i>.cross.<j>" for a decoder, j indexing StateTensors() (e.g. 0 =
// S, 1 = Z of a linear attention).
std::map<std::string, torch::Tensor> NamedStateTensors(const RecurrentEncoderState& state);
std::map<std::string, torch::Tensor> NamedStateTensors(const RecurrentDecoderState& state);

class RecurrentTransformerEncoderLayerImpl : public torch::nn::Module, public Introspectable {
 public:
  RecurrentTransformerEncoderLayerImpl(RecurrentAttentionLayerPtr attention, int64_t d_model,
                                       std::optional<int64_t> d_ff = std::nullopt,
                                       double dropout = 0.1,
                                       const std::string& activation = "relu");

  // x (N, d_model) -> (N, d_model); `state` is read and updated.
  torch::Tensor forward(const torch::Tensor& x, AttentionState& state);
  // The slot form: x (N, n, d_model), the next n tokens of N pool rows.
  torch::Tensor ForwardSlots(const torch::Tensor& x, SlotRows& rows);

  std::string class_name() const override { return "RecurrentTransformerEncoderLayer"; }
  // dropout.p, activation, d_model, d_ff.
  std::optional<ParamValue> attribute(const std::string& name) const override;

  RecurrentAttentionLayerPtr attention;
  torch::nn::Linear linear1{nullptr};
  torch::nn::Linear linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  // What follows the attention: residual, norm1, feed-forward, norm2.
  torch::Tensor AfterAttention(const torch::Tensor& x, const torch::Tensor& attended);

  int64_t d_model_;
  int64_t d_ff_;
  Activation activation_;
};

class RecurrentTransformerDecoderLayerImpl : public torch::nn::Module, public Introspectable {
 public:
  RecurrentTransformerDecoderLayerImpl(RecurrentAttentionLayerPtr self_attention,
                                       RecurrentCrossAttentionLayerPtr cross_attention,
                                       int64_t d_model, std::optional<int64_t> d_ff = std::nullopt,
                                       double dropout = 0.1,
                                       const std::string& activation = "relu");

  // x (N, d_model), memory (N, S, d_mem) -> (N, d_model); `state` is read
  // and updated.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const std::optional<Mask>& memory_length_mask,
                        RecurrentDecoderLayerState& state);

  std::string class_name() const override { return "RecurrentTransformerDecoderLayer"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  RecurrentAttentionLayerPtr self_attention;
  RecurrentCrossAttentionLayerPtr cross_attention;
  torch::nn::Linear linear1{nullptr};
  torch::nn::Linear linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  torch::nn::LayerNorm norm3{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  int64_t d_model_;
  int64_t d_ff_;
  Activation activation_;
};

using RecurrentTransformerEncoderLayerPtr = std::shared_ptr<RecurrentTransformerEncoderLayerImpl>;
using RecurrentTransformerDecoderLayerPtr = std::shared_ptr<RecurrentTransformerDecoderLayerImpl>;

class RecurrentTransformerEncoderImpl : public torch::nn::Module, public Introspectable {
 public:
  explicit RecurrentTransformerEncoderImpl(std::vector<RecurrentTransformerEncoderLayerPtr> layers,
                                           torch::nn::LayerNorm norm_layer = nullptr);

  // x (N, d_model) -> (N, d_model); `state` is read and updated.
  torch::Tensor forward(const torch::Tensor& x, RecurrentEncoderState& state);

  // The slot form (core/recurrent/slot_state.h): every layer's per-sequence
  // tensors for sequences of up to `max_length` tokens (the layout of a
  // StatePool), and x (N, n, d_model) for the next n tokens of N pool rows,
  // rows[i] being layer i's -> (N, n, d_model). Positions are not advanced.
  std::vector<std::vector<SlotTensorSpec>> SlotStateSpecs(int64_t max_length) const;
  torch::Tensor ForwardSlots(const torch::Tensor& x, std::vector<SlotRows>& rows);

  std::string class_name() const override { return "RecurrentTransformerEncoder"; }

  const std::vector<RecurrentTransformerEncoderLayerPtr>& layers() const { return layers_; }
  const torch::nn::LayerNorm& norm() const { return norm_; }

 private:
  std::vector<RecurrentTransformerEncoderLayerPtr> layers_;
  torch::nn::LayerNorm norm_{nullptr};
};

class RecurrentTransformerDecoderImpl : public torch::nn::Module, public Introspectable {
 public:
  explicit RecurrentTransformerDecoderImpl(std::vector<RecurrentTransformerDecoderLayerPtr> layers,
                                           torch::nn::LayerNorm norm_layer = nullptr);

  // x (N, d_model), memory (N, S, d_mem) -> (N, d_model); `state` is read
  // and updated.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const std::optional<Mask>& memory_length_mask,
                        RecurrentDecoderState& state);

  std::string class_name() const override { return "RecurrentTransformerDecoder"; }

  const std::vector<RecurrentTransformerDecoderLayerPtr>& layers() const { return layers_; }
  const torch::nn::LayerNorm& norm() const { return norm_; }

 private:
  std::vector<RecurrentTransformerDecoderLayerPtr> layers_;
  torch::nn::LayerNorm norm_{nullptr};
};

using RecurrentTransformerEncoderPtr = std::shared_ptr<RecurrentTransformerEncoderImpl>;
using RecurrentTransformerDecoderPtr = std::shared_ptr<RecurrentTransformerDecoderImpl>;

}  // namespace performer
