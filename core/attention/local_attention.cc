#include "core/attention/local_attention.h"

#include <torch/torch.h>

#include "core/attention/attention_parameters.h"
#include "core/attention/module_attributes.h"
#include "kernels/local_product.h"

namespace performer {

LocalAttentionImpl::LocalAttentionImpl(int64_t local_context, std::optional<double> softmax_temp,
                                       double attention_dropout, std::string event_dispatcher)
    : local_context_(local_context),
      softmax_temp_(softmax_temp),
      dropout_(torch::nn::DropoutOptions(attention_dropout)),
      event_dispatcher_(std::move(event_dispatcher)) {
  register_module("dropout", dropout_);
}

torch::Tensor LocalAttentionImpl::forward(const torch::Tensor& queries, const torch::Tensor& keys,
                                          const torch::Tensor& values, const Mask& attn_mask,
                                          const Mask& /*query_lengths*/, const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
              "LocalAttention expects queries (N,L,H,E), keys (N,S,H,E) and values (N,S,H,D)");
  absl::StatusOr<torch::Tensor> lengths = key_lengths.lengths();
  TORCH_CHECK(lengths.ok(), "LocalAttention needs key_lengths to be a length mask: ",
              std::string(lengths.status().message()));
  const double temperature = SoftmaxTemperature(softmax_temp_, queries.size(3));
  const torch::Device device = queries.device();
  torch::Tensor scores = kernels::LocalDotProduct(
      queries.permute({0, 2, 1, 3}).contiguous(), keys.permute({0, 2, 1, 3}).contiguous(),
      attn_mask.additive_matrix_finite().to(device), lengths->to(device, torch::kInt64),
      local_context_);
  torch::Tensor attention = dropout_(torch::softmax(scores * temperature, -1));
  torch::Tensor out =
      kernels::LocalWeightedAverage(attention, values.permute({0, 2, 1, 3}).contiguous());
  return out.permute({0, 2, 1, 3}).contiguous();
}

std::optional<ParamValue> LocalAttentionImpl::attribute(const std::string& name) const {
  if (name == "local_context") return ParamValue(local_context_);
  if (name == "softmax_temp") return attention_parameters::OptionalFloatValue(softmax_temp_);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return SubmoduleAttribute(*this, name);
}

absl::Status RegisterLocalAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register("local", "LocalAttention",
                           {{"local_context", ap::LocalContext()},
                            {"softmax_temp", ap::SoftmaxTemp()},
                            {"attention_dropout", ap::AttentionDropout()},
                            {"event_dispatcher", ap::EventDispatcher()}},
                           [](const std::vector<AttentionPtr>& /*positional*/,
                              const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
                             const double dropout = ap::Float(params, "attention_dropout");
                             absl::Status valid = ap::CheckDropoutProbability(dropout);
                             if (!valid.ok()) return valid;
                             return ap::Construct<AttentionImpl>([&] {
                               return std::make_shared<LocalAttentionImpl>(
                                   ap::Int(params, "local_context"),
                                   ap::OptionalFloat(params, "softmax_temp"), dropout,
                                   ap::String(params, "event_dispatcher"));
                             });
                           });
}

}  // namespace performer
