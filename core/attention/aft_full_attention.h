// AFTFullAttention ("aft-full"): the full Attention Free Transformer
// (arxiv.org/abs/2105.14103) with a low-rank learned position bias.
//
//   w[l,s] = (u[:L] v[:S]^T)[l,s] + attn_add[l,s]          (attn_add always added)
//   z[n,l,h,e,s] = (k[n,s,h,e] + key_add[n,s]) * w[l,s]
//   out[n,l,h,e] = sigmoid(q[n,l,h,e]) * sum_s softmax_s(z)[n,l,h,e,s] v[n,s,h,e]
//
// As in the reference the bias multiplies the keys (its docstring says it is
// added). attn_add / key_add are additive (0 / -inf) masks; multiplied by w a
// masked entry becomes -inf, +inf or NaN depending on the sign of w, so only
// all-ones masks are meaningful. Requires E == D ("AFT requires that queries,
// keys and values have the same dimensionality") and L, S <=
// max_sequence_length. Memory O(N L H E S). query_lengths is ignored.
//
// Parameters (registry name "aft-full"):
//   max_sequence_length   Optional(Int), default 1024
//   aft_parameterization  Optional(Int), default 64
//   event_dispatcher      Optional(EventDispatcherInstance), default "" (stored only)
//
// Parameters "u" and "v", each (max_sequence_length, aft_parameterization),
// initialised N(0,1) * 0.01. Attributes: max_sequence_length,
// aft_parameterization, event_dispatcher.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"

namespace performer {

class AFTFullAttentionImpl : public AttentionImpl {
 public:
  explicit AFTFullAttentionImpl(int64_t max_sequence_length = 1024,
                                int64_t aft_parameterization = 64,
                                std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "AFTFullAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const torch::Tensor& u() const { return u_; }
  const torch::Tensor& v() const { return v_; }

 private:
  torch::Tensor u_;
  torch::Tensor v_;
  std::string event_dispatcher_;
};

// Registers "aft-full" with parameters max_sequence_length,
// aft_parameterization, event_dispatcher.
absl::Status RegisterAFTFullAttention(AttentionRegistry& registry);

}  // namespace performer
