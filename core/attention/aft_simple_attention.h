// AFTSimpleAttention ("aft-simple"): the parameter-free Attention Free
// Transformer (arxiv.org/abs/2105.14103), per channel e:
//
//   k'[n,s,h,e] = k[n,s,h,e] + key_add[n,s]
//   attn_mask.lower_triangular (checked first):
//     m = max_s k'_s,  w_s = exp(k'_s - m) / sum_{j<=s} exp(k'_j - m)
//     out_l = sigmoid(q_l) * sum_{s<=l} w_s * v_s
//   attn_mask.all_ones:
//     out_l = sigmoid(q_l) * sum_s softmax_s(k')_s * v_s
//   any other mask: error ("You cannot use general attention masks with
//   AFTSimpleAttention because it would be quadratic in time. Use
//   AFTFullAttention instead.")
//
// The causal branch is the reference's formula: each weight is normalised by
// its own prefix sum, which is not a causal softmax (and needs L == S).
// Requires E == D ("AFT requires that queries, keys and values have the same
// dimensionality"). key_add = key_lengths.additive_matrix (0 / -inf);
// query_lengths is ignored.
//
// Parameters (registry name "aft-simple"):
//   event_dispatcher  Optional(EventDispatcherInstance), default "" (stored only)
//
// No parameters or buffers. Attributes: event_dispatcher.
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"

namespace performer {

class AFTSimpleAttentionImpl : public AttentionImpl {
 public:
  explicit AFTSimpleAttentionImpl(std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "AFTSimpleAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

 private:
  std::string event_dispatcher_;
};

// Registers "aft-simple" with parameter event_dispatcher.
absl::Status RegisterAFTSimpleAttention(AttentionRegistry& registry);

}  // namespace performer
