// Softmax attention one step at a time: RecurrentFullAttention (self) and
// RecurrentCrossFullAttention (cross), as fast-transformers'
// recurrent.attention.{self,cross}_attention.full_attention.
//
// Self (registry "full" of the recurrent registry), step t with query q,
// key k, value v (N,H,E)/(N,H,D):
//   K <- [K, k], V <- [V, v]                  state RecurrentFullState, (N,H,t,E) / (N,H,t,D)
//   A = softmax_s(temp * q . K_s)             (N,H,t)   temp multiplies the score
//   out = sum_s A_s V_s                       (N,H,D)
// The state grows with t (the softmax KV cache).
//
// Cross (registry "full" of the recurrent cross registry), memory keys
// (N,S,H,E) and values (N,S,H,D) already projected:
//   A = softmax_s(temp * (q . K_s + key_add[n,s]))   (N,S,H), key_add = key_lengths additive
//   out = sum_s A_s V_s
// state CrossFullState = the memory keys/values, stored on the first call.
// Unlike keys/values, key_lengths is read at every step (as in the
// reference): callers pass the same mask at every step.
//
// Parameters (Python defaults):
//   softmax_temp       temperature, default (nullopt or 0) 1/sqrt(E)
//   attention_dropout  dropout on the attention weights, 0.1 (inactive in eval mode)
//   event_dispatcher   kept for introspection; no events are dispatched
// Registry parameters: softmax_temp Optional(Float), attention_dropout
// Optional(Float, 0.1), event_dispatcher Optional(EventDispatcherInstance, "").
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"
#include "core/recurrent/recurrent_attention.h"

namespace performer {

class RecurrentFullAttentionImpl : public RecurrentAttentionImpl {
 public:
  explicit RecurrentFullAttentionImpl(std::optional<double> softmax_temp = std::nullopt,
                                      double attention_dropout = 0.1,
                                      std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key,
                        const torch::Tensor& value, AttentionState& state) override;
  // Slot form: every past key and value (key_value_slots.h), softmax over
  // the visible ones; on the CPU, and on CUDA under row invariance, a query
  // at a time (kernels/causal_softmax_attention.h), so that a token's output
  // does not depend on how its sequence was fed.
  std::vector<SlotTensorSpec> SlotStateSpec(const SlotShape& shape) const override;
  torch::Tensor ForwardSlots(const torch::Tensor& queries, const torch::Tensor& keys,
                             const torch::Tensor& values, SlotRows& rows) override;

  std::string class_name() const override { return "RecurrentFullAttention"; }
  // softmax_temp (None or float), dropout.p, event_dispatcher.
  std::optional<ParamValue> attribute(const std::string& name) const override;

 private:
  std::optional<double> softmax_temp_;
  std::string event_dispatcher_;
  torch::nn::Dropout dropout_{nullptr};
};

class RecurrentCrossFullAttentionImpl : public RecurrentCrossAttentionImpl {
 public:
  explicit RecurrentCrossFullAttentionImpl(std::optional<double> softmax_temp = std::nullopt,
                                           double attention_dropout = 0.1,
                                           std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& key_lengths,
                        AttentionState& state) override;

  std::string class_name() const override { return "RecurrentCrossFullAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

 private:
  std::optional<double> softmax_temp_;
  std::string event_dispatcher_;
  torch::nn::Dropout dropout_{nullptr};
};

// Registers "full" in the recurrent self / cross registries.
absl::Status RegisterRecurrentFullAttention(RecurrentAttentionRegistry& registry);
absl::Status RegisterRecurrentCrossFullAttention(RecurrentCrossAttentionRegistry& registry);

}  // namespace performer
