// ExactTopKAttention ("exact-topk"): softmax attention over the k highest
// scoring keys of each query.
//
//   sc[n,h,l,s] = q_l . k_s + attn_add[l,s] + key_add[n,s]   (unscaled)
//   keep the k = min(topk, S) largest entries of each row (ties arbitrary),
//   set the others to -inf
//   A = softmax_s(t * sc),  t = softmax_temp, or 1/sqrt(E) when None or 0
//   out[n,l,h] = sum_s dropout(A)[n,h,l,s] v_s
//
// The selection is made on the masked, unscaled scores. attn_add is
// attn_mask.additive_matrix (skipped when all ones); key_add =
// key_lengths.additive_matrix is always added. query_lengths is ignored. A
// fully masked row gives NaN.
//
// Parameters (registry name "exact-topk"):
//   topk               Optional(Int), default 32
//   softmax_temp       Optional(Float), default None (1/sqrt(E))
//   attention_dropout  Optional(Float), default 0.1 (inactive in eval)
//   event_dispatcher   Optional(EventDispatcherInstance), default "" (stored only)
//
// Attributes: topk, softmax_temp, dropout.p, event_dispatcher.
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"

namespace performer {

class ExactTopKAttentionImpl : public AttentionImpl {
 public:
  explicit ExactTopKAttentionImpl(int64_t topk = 32,
                                  std::optional<double> softmax_temp = std::nullopt,
                                  double attention_dropout = 0.1,
                                  std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "ExactTopKAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  int64_t topk() const { return topk_; }

 private:
  int64_t topk_;
  std::optional<double> softmax_temp_;
  torch::nn::Dropout dropout_;
  std::string event_dispatcher_;
};

// Registers "exact-topk" with parameters topk, softmax_temp,
// attention_dropout, event_dispatcher.
absl::Status RegisterExactTopKAttention(AttentionRegistry& registry);

}  // namespace performer
