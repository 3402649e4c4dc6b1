// ConditionalFullAttention ("conditional-full"): a decorator that runs full
// softmax attention on short inputs and another attention on long ones:
//
//   L > length_limit or S > length_limit  ->  other_attention(...)
//   otherwise                              ->  full_attention(...)
//
// where full_attention = FullAttention(softmax_temp, attention_dropout) with
// the default event dispatcher. Everything (masks included) is passed through
// to the delegate unchanged. It can only be built by composition, e.g.
// "conditional-full:linear": the wrapped module is its first, required,
// positional constructor argument.
//
// Parameters (registry name "conditional-full"):
//   other_attention    the decorated module (positional, required)
//   length_limit       Optional(Int), default 512
//   softmax_temp       Optional(Float), default None (1/sqrt(E))
//   attention_dropout  Optional(Float), default 0.1
//   event_dispatcher   Optional(EventDispatcherInstance), default "" (stored only)
//
// Submodules "full_attention" then "other_attention" (state-dict prefixes).
// Attributes: length_limit, event_dispatcher, full_attention.<attribute>,
// other_attention.<attribute>.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"
#include "core/attention/full_attention.h"

namespace performer {

class ConditionalFullAttentionImpl : public AttentionImpl {
 public:
  ConditionalFullAttentionImpl(AttentionPtr other_attention, int64_t length_limit = 512,
                               std::optional<double> softmax_temp = std::nullopt,
                               double attention_dropout = 0.1, std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "ConditionalFullAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  int64_t length_limit() const { return length_limit_; }
  const std::shared_ptr<FullAttentionImpl>& full_attention() const { return full_attention_; }
  const AttentionPtr& other_attention() const { return other_attention_; }

 private:
  std::shared_ptr<FullAttentionImpl> full_attention_;
  AttentionPtr other_attention_;
  int64_t length_limit_;
  std::string event_dispatcher_;
};

// Registers "conditional-full" with parameters length_limit, softmax_temp,
// attention_dropout, event_dispatcher and the constructor arguments
// (other_attention, length_limit, softmax_temp, attention_dropout,
// event_dispatcher), the first one a required positional module.
absl::Status RegisterConditionalFullAttention(AttentionRegistry& registry);

}  // namespace performer
