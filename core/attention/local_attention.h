// LocalAttention ("local"): softmax attention restricted to a window of
// local_context = c keys around each query, O(N L c E).
//
// Window of query l: keys s with l - floor(c/2) <= s < l + ceil(c/2) (c odd:
// (c-1)/2 on each side; c even: c/2 before and c/2 - 1 after), slot
// k = s - l + floor(c/2). Each of the c slots holds
//   q_l . k_s + attn_finite[l,s]   when 0 <= s < key_lengths.lengths[n]
//   -1e24                          otherwise
//   A = softmax(t * slots)   (temperature after masking; t = softmax_temp, or
//                             1/sqrt(E) when None or 0)
//   out[n,l,h] = sum over slots with 0 <= s < S of dropout(A)_slot v_s
// attn_finite = attn_mask.additive_matrix_finite (-0.0 keep / -1e24 drop), so
// masking is finite: a row whose window holds no valid key is a uniform
// average over its in-range slots (padded keys included), never NaN.
// key_lengths must be a length mask; query_lengths is ignored.
//
// Parameters (registry name "local"):
//   local_context      Int, required (c)
//   softmax_temp       Optional(Float), default None (1/sqrt(E))
//   attention_dropout  Optional(Float), default 0.1 (inactive in eval)
//   event_dispatcher   Optional(EventDispatcherInstance), default "" (stored only)
//
// Attributes: local_context, softmax_temp, dropout.p, event_dispatcher.
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"

namespace performer {

class LocalAttentionImpl : public AttentionImpl {
 public:
  explicit LocalAttentionImpl(int64_t local_context,
                              std::optional<double> softmax_temp = std::nullopt,
                              double attention_dropout = 0.1, std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "LocalAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  int64_t local_context() const { return local_context_; }

 private:
  int64_t local_context_;
  std::optional<double> softmax_temp_;
  torch::nn::Dropout dropout_;
  std::string event_dispatcher_;
};

// Registers "local" with parameters local_context, softmax_temp,
// attention_dropout, event_dispatcher.
absl::Status RegisterLocalAttention(AttentionRegistry& registry);

}  // namespace performer
