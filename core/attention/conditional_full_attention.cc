#include "core/attention/conditional_full_attention.h"

#include <torch/torch.h>

#include "core/attention/attention_parameters.h"
#include "core/attention/module_attributes.h"

namespace performer {

ConditionalFullAttentionImpl::ConditionalFullAttentionImpl(AttentionPtr other_attention,
                                                           int64_t length_limit,
                                                           std::optional<double> softmax_temp,
                                                           double attention_dropout,
                                                           std::string event_dispatcher)
    : full_attention_(std::make_shared<FullAttentionImpl>(softmax_temp, attention_dropout)),
      other_attention_(std::move(other_attention)),
      length_limit_(length_limit),
      event_dispatcher_(std::move(event_dispatcher)) {
  TORCH_CHECK(other_attention_ != nullptr, "ConditionalFullAttention needs an other_attention");
  // Registration order = the reference's state-dict order.
  register_module("full_attention", full_attention_);
  register_module("other_attention", other_attention_);
}

torch::Tensor ConditionalFullAttentionImpl::forward(
    const torch::Tensor& queries, const torch::Tensor& keys, const torch::Tensor& values,
    const Mask& attn_mask, const Mask& query_lengths, const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 4 && values.dim() == 4,
              "ConditionalFullAttention expects queries (N,L,H,E) and values (N,S,H,D)");
  const int64_t query_length = queries.size(1);
  const int64_t key_length = values.size(1);
  if (query_length > length_limit_ || key_length > length_limit_) {
    return other_attention_->forward(queries, keys, values, attn_mask, query_lengths, key_lengths);
  }
  return full_attention_->forward(queries, keys, values, attn_mask, query_lengths, key_lengths);
}

std::optional<ParamValue> ConditionalFullAttentionImpl::attribute(const std::string& name) const {
  if (name == "length_limit") return ParamValue(length_limit_);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return SubmoduleAttribute(*this, name);
}

absl::Status RegisterConditionalFullAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register(
      "conditional-full", "ConditionalFullAttention",
      {{"length_limit", ap::LengthLimit()},
       {"softmax_temp", ap::SoftmaxTemp()},
       {"attention_dropout", ap::AttentionDropout()},
       {"event_dispatcher", ap::EventDispatcher()}},
      [](const std::vector<AttentionPtr>& positional,
         const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
        // The registry has checked the count: exactly the one wrapped module.
        const double dropout = ap::Float(params, "attention_dropout");
        absl::Status valid = ap::CheckDropoutProbability(dropout);
        if (!valid.ok()) return valid;
        return ap::Construct<AttentionImpl>([&] {
          return std::make_shared<ConditionalFullAttentionImpl>(
              positional.at(0), ap::Int(params, "length_limit"),
              ap::OptionalFloat(params, "softmax_temp"), dropout,
              ap::String(params, "event_dispatcher"));
        });
      },
      {"other_attention", "length_limit", "softmax_temp", "attention_dropout", "event_dispatcher"},
      /*required_positional=*/1);
}

}  // namespace performer
