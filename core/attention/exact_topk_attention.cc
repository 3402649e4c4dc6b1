#include "core/attention/exact_topk_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>

#include "core/attention/attention_parameters.h"
#include "core/attention/module_attributes.h"

namespace performer {

using torch::indexing::None;
using torch::indexing::Slice;

ExactTopKAttentionImpl::ExactTopKAttentionImpl(int64_t topk, std::optional<double> softmax_temp,
                                               double attention_dropout,
                                               std::string event_dispatcher)
    : topk_(topk),
      softmax_temp_(softmax_temp),
      dropout_(torch::nn::DropoutOptions(attention_dropout)),
      event_dispatcher_(std::move(event_dispatcher)) {
  register_module("dropout", dropout_);
}

torch::Tensor ExactTopKAttentionImpl::forward(const torch::Tensor& queries,
                                              const torch::Tensor& keys,
                                              const torch::Tensor& values, const Mask& attn_mask,
                                              const Mask& /*query_lengths*/,
                                              const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
              "ExactTopKAttention expects queries (N,L,H,E), keys (N,S,H,E) and values (N,S,H,D)");
  const double temperature = SoftmaxTemperature(softmax_temp_, queries.size(3));
  const int64_t k = std::min(topk_, values.size(1));
  TORCH_CHECK(k >= 0, "ExactTopKAttention needs topk >= 0, got ", topk_);
  torch::Tensor scores = torch::einsum("nlhe,nshe->nhls", {queries, keys});
  if (!attn_mask.all_ones()) {
    scores = scores + attn_mask.additive_matrix().to(scores.device());
  }
  scores = scores + key_lengths.additive_matrix().to(scores.device()).index({Slice(), None, None});
  torch::Tensor top_indices =
      std::get<1>(torch::topk(scores, k, /*dim=*/-1, /*largest=*/true, /*sorted=*/false));
  torch::Tensor drop = torch::full_like(scores, -std::numeric_limits<double>::infinity())
                           .scatter(-1, top_indices, 0.0);
  torch::Tensor attention = dropout_(torch::softmax((scores + drop) * temperature, -1));
  return torch::einsum("nhls,nshd->nlhd", {attention, values}).contiguous();
}

std::optional<ParamValue> ExactTopKAttentionImpl::attribute(const std::string& name) const {
  if (name == "topk") return ParamValue(topk_);
  if (name == "softmax_temp") return attention_parameters::OptionalFloatValue(softmax_temp_);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return SubmoduleAttribute(*this, name);
}

absl::Status RegisterExactTopKAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register("exact-topk", "ExactTopKAttention",
                           {{"topk", ap::TopK()},
                            {"softmax_temp", ap::SoftmaxTemp()},
                            {"attention_dropout", ap::AttentionDropout()},
                            {"event_dispatcher", ap::EventDispatcher()}},
                           [](const std::vector<AttentionPtr>& /*positional*/,
                              const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
                             const double dropout = ap::Float(params, "attention_dropout");
                             absl::Status valid = ap::CheckDropoutProbability(dropout);
                             if (!valid.ok()) return valid;
                             return ap::Construct<AttentionImpl>([&] {
                               return std::make_shared<ExactTopKAttentionImpl>(
                                   ap::Int(params, "topk"),
                                   ap::OptionalFloat(params, "softmax_temp"), dropout,
                                   ap::String(params, "event_dispatcher"));
                             });
                           });
}

}  // namespace performer
