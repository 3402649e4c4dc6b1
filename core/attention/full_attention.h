// FullAttention ("full"): softmax attention over all keys.
//
//   t = softmax_temp, or 1/sqrt(E) when None or 0
//   A[n,h,l,s] = softmax_s( (t q_l) . k_s + attn_add[l,s] + key_add[n,s] )
//   out[n,l,h] = sum_s dropout(A)[n,h,l,s] v_s
//
// The queries are scaled before the product (rounding-level difference from
// scaling the scores). attn_add = attn_mask.additive_matrix (0 / -inf),
// skipped when the mask is all ones; key_add = key_lengths.additive_matrix,
// likewise. query_lengths is ignored. A fully masked row gives NaN.
//
// Parameters (registry name "full"):
//   softmax_temp       Optional(Float), default None (1/sqrt(E))
//   attention_dropout  Optional(Float), default 0.1 (dropout on A; inactive in eval)
//   event_dispatcher   Optional(EventDispatcherInstance), default "" (stored only)
//
// Attributes: softmax_temp, dropout.p, event_dispatcher.
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"

namespace performer {

class FullAttentionImpl : public AttentionImpl {
 public:
  explicit FullAttentionImpl(std::optional<double> softmax_temp = std::nullopt,
                             double attention_dropout = 0.1, std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "FullAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const std::optional<double>& softmax_temp() const { return softmax_temp_; }

 private:
  std::optional<double> softmax_temp_;
  torch::nn::Dropout dropout_;
  std::string event_dispatcher_;
};

// Registers "full" with parameters softmax_temp, attention_dropout,
// event_dispatcher.
absl::Status RegisterFullAttention(AttentionRegistry& registry);

}  // namespace performer
