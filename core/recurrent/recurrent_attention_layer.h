// The projections around a recurrent inner attention, one time step at a
// time: RecurrentAttentionLayer (self) and RecurrentCrossAttentionLayer
// (cross), as fast-transformers' recurrent attention layers.
//
// Both have the same four Linear submodules, names and shapes as
// AttentionLayer (query_projection (H*d_keys, d_model), key_projection
// (H*d_keys, d_model_keys), value_projection (H*d_values, d_model_keys),
// out_projection (d_model, H*d_values)) plus "inner_attention", so batch and
// recurrent twins load the same state dict. The head split is head-major.
//
// Self: query, key, value (N, d_model) -> views (N, H, -1) -> inner
// attention -> (N, H*d_values) -> out_projection -> (N, d_model); the state
// is the inner attention's (updated in place through the reference).
//
// Cross: query (N, d_model), keys/values (N, S, d_model_keys). Keys and
// values are projected to (N, S, H, -1) only when the state is new; once the
// inner attention holds the memory in its state they are ignored (they may be
// undefined) and the inner attention receives undefined tensors.
//
// Parameters (Python defaults): attention, d_model, n_heads,
// d_keys = d_model / n_heads, d_values = d_model / n_heads,
// d_model_keys = d_model. The reference's deprecated `memory` alias of
// `state` is not ported.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/introspection.h"
#include "core/masks.h"
#include "core/recurrent/recurrent_attention.h"

namespace performer {

class RecurrentAttentionLayerImpl : public torch::nn::Module, public Introspectable {
 public:
  RecurrentAttentionLayerImpl(RecurrentAttentionPtr attention, int64_t d_model, int64_t n_heads,
                              std::optional<int64_t> d_keys = std::nullopt,
                              std::optional<int64_t> d_values = std::nullopt,
                              std::optional<int64_t> d_model_keys = std::nullopt);

  // query, key, value (N, d_model) -> (N, d_model); `state` is read and updated.
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key,
                        const torch::Tensor& value, AttentionState& state);

  // The slot form (slot_state.h) of the inner attention under these
  // projections: its per-sequence tensors for sequences of up to
  // `max_length` tokens, and x [N, n, d_model] (self attention over the next
  // n tokens of N pool rows) -> [N, n, d_model].
  std::vector<SlotTensorSpec> SlotStateSpec(int64_t max_length) const;
  torch::Tensor ForwardSlots(const torch::Tensor& x, SlotRows& rows);

  std::string class_name() const override { return "RecurrentAttentionLayer"; }
  // n_heads, d_model, d_keys, d_values, d_model_keys.
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const RecurrentAttentionPtr& inner_attention() const { return inner_attention_; }
  int64_t n_heads() const { return n_heads_; }

  torch::nn::Linear query_projection{nullptr};
  torch::nn::Linear key_projection{nullptr};
  torch::nn::Linear value_projection{nullptr};
  torch::nn::Linear out_projection{nullptr};

 private:
  RecurrentAttentionPtr inner_attention_;
  int64_t d_model_;
  int64_t n_heads_;
  int64_t d_keys_;
  int64_t d_values_;
  int64_t d_model_keys_;
};

class RecurrentCrossAttentionLayerImpl : public torch::nn::Module, public Introspectable {
 public:
  RecurrentCrossAttentionLayerImpl(RecurrentCrossAttentionPtr attention, int64_t d_model,
                                   int64_t n_heads, std::optional<int64_t> d_keys = std::nullopt,
                                   std::optional<int64_t> d_values = std::nullopt,
                                   std::optional<int64_t> d_model_keys = std::nullopt);

  // query (N, d_model), keys/values (N, S, d_model_keys) (read only when the
  // state is new), key_lengths an N x S length mask -> (N, d_model).
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& key_lengths,
                        AttentionState& state);

  std::string class_name() const override { return "RecurrentCrossAttentionLayer"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const RecurrentCrossAttentionPtr& inner_attention() const { return inner_attention_; }
  int64_t n_heads() const { return n_heads_; }

  torch::nn::Linear query_projection{nullptr};
  torch::nn::Linear key_projection{nullptr};
  torch::nn::Linear value_projection{nullptr};
  torch::nn::Linear out_projection{nullptr};

 private:
  RecurrentCrossAttentionPtr inner_attention_;
  int64_t d_model_;
  int64_t n_heads_;
  int64_t d_keys_;
  int64_t d_values_;
  int64_t d_model_keys_;
};

using RecurrentAttentionLayerPtr = std::shared_ptr<RecurrentAttentionLayerImpl>;
using RecurrentCrossAttentionLayerPtr = std::shared_ptr<RecurrentCrossAttentionLayerImpl>;

}  // namespace performer
