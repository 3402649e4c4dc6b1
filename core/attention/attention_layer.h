// AttentionLayer: the multi-head projections around an inner attention, as
// fast-transformers' AttentionLayer.
//
//   q = query_projection(queries)  (N, L, d_model)      -> (N, L, H, d_keys)
//   k = key_projection(keys)       (N, S, d_model_keys) -> (N, S, H, d_keys)
//   v = value_projection(values)   (N, S, d_model_keys) -> (N, S, H, d_values)
//   out = out_projection(inner_attention(q, k, v, masks).reshape(N, L, H * d_values))
//
// The head split is head-major: projected feature j belongs to head
// j / d_keys. Parameters (Python defaults):
//   attention     the inner attention (a module registered as "inner_attention")
//   d_model       model width
//   n_heads       H
//   d_keys        per-head query/key size, default d_model / n_heads
//   d_values      per-head value size, default d_model / n_heads
//   d_model_keys  width of the keys/values inputs, default d_model
// d_keys is not forwarded to the inner attention: linear attentions must be
// built with a matching query_dimensions (builders do this).
// State-dict names: inner_attention.*, query_projection, key_projection,
// value_projection, out_projection (.weight (out, in) and .bias each).
// The reference's QKVEvent is not dispatched (this port has no event system).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/attention/attention.h"
#include "core/introspection.h"
#include "core/masks.h"

namespace performer {

class AttentionLayerImpl : public torch::nn::Module, public Introspectable {
 public:
  AttentionLayerImpl(AttentionPtr attention, int64_t d_model, int64_t n_heads,
                     std::optional<int64_t> d_keys = std::nullopt,
                     std::optional<int64_t> d_values = std::nullopt,
                     std::optional<int64_t> d_model_keys = std::nullopt);

  // queries (N, L, d_model), keys and values (N, S, d_model_keys) -> (N, L, d_model).
  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths);

  std::string class_name() const override { return "AttentionLayer"; }
  // n_heads, d_model, d_keys, d_values, d_model_keys.
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const AttentionPtr& inner_attention() const { return inner_attention_; }
  int64_t n_heads() const { return n_heads_; }
  int64_t d_keys() const { return d_keys_; }
  int64_t d_values() const { return d_values_; }

  torch::nn::Linear query_projection{nullptr};
  torch::nn::Linear key_projection{nullptr};
  torch::nn::Linear value_projection{nullptr};
  torch::nn::Linear out_projection{nullptr};

 private:
  AttentionPtr inner_attention_;
  int64_t d_model_;
  int64_t n_heads_;
  int64_t d_keys_;
  int64_t d_values_;
  int64_t d_model_keys_;
};

using AttentionLayerPtr = std::shared_ptr<AttentionLayerImpl>;

// The per-head size d_model / n_heads used when d_keys / d_values are not
// given (Python's d_model // n_heads).
inline int64_t DefaultHeadDims(int64_t d_model, int64_t n_heads) { return d_model / n_heads; }

}  // namespace performer
