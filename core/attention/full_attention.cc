#include "core/attention/full_attention.h"

#include <torch/torch.h>

#include "core/attention/attention_parameters.h"
#include "core/attention/module_attributes.h"

namespace performer {

using torch::indexing::None;
using torch::indexing::Slice;

FullAttentionImpl::FullAttentionImpl(std::optional<double> softmax_temp, double attention_dropout,
                                     std::string event_dispatcher)
    : softmax_temp_(softmax_temp),
      dropout_(torch::nn::DropoutOptions(attention_dropout)),
      event_dispatcher_(std::move(event_dispatcher)) {
  register_module("dropout", dropout_);
}

torch::Tensor FullAttentionImpl::forward(const torch::Tensor& queries, const torch::Tensor& keys,
                                         const torch::Tensor& values, const Mask& attn_mask,
                                         const Mask& /*query_lengths*/, const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
              "FullAttention expects queries (N,L,H,E), keys (N,S,H,E) and values (N,S,H,D)");
  const double temperature = SoftmaxTemperature(softmax_temp_, queries.size(3));
  torch::Tensor scores = torch::einsum("nlhe,nshe->nhls", {queries * temperature, keys});
  if (!attn_mask.all_ones()) {
    scores = scores + attn_mask.additive_matrix().to(scores.device());
  }
  if (!key_lengths.all_ones()) {
    scores =
        scores + key_lengths.additive_matrix().to(scores.device()).index({Slice(), None, None});
  }
  torch::Tensor attention = dropout_(torch::softmax(scores, -1));
  return torch::einsum("nhls,nshd->nlhd", {attention, values}).contiguous();
}

std::optional<ParamValue> FullAttentionImpl::attribute(const std::string& name) const {
  if (name == "softmax_temp") return attention_parameters::OptionalFloatValue(softmax_temp_);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return SubmoduleAttribute(*this, name);
}

absl::Status RegisterFullAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register("full", "FullAttention",
                           {{"softmax_temp", ap::SoftmaxTemp()},
                            {"attention_dropout", ap::AttentionDropout()},
                            {"event_dispatcher", ap::EventDispatcher()}},
                           [](const std::vector<AttentionPtr>& /*positional*/,
                              const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
                             const double dropout = ap::Float(params, "attention_dropout");
                             absl::Status valid = ap::CheckDropoutProbability(dropout);
                             if (!valid.ok()) return valid;
                             return ap::Construct<AttentionImpl>([&] {
                               return std::make_shared<FullAttentionImpl>(
                                   ap::OptionalFloat(params, "softmax_temp"), dropout,
                                   ap::String(params, "event_dispatcher"));
                             });
                           });
}

}  // namespace performer
