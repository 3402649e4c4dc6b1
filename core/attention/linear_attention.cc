#include "core/attention/linear_attention.h"

#include <torch/torch.h>

#include "core/attention/attention_parameters.h"
#include "core/attention/module_attributes.h"
#include "core/feature_maps/feature_map_catalogue.h"
#include "kernels/linear_attention.h"

namespace performer {

using torch::indexing::None;
using torch::indexing::Slice;

FeatureMapPtr MakeLinearAttentionFeatureMap(int64_t query_dimensions,
                                            const std::optional<NamedFeatureMapFactory>& factory) {
  const NamedFeatureMapFactory chosen = factory.has_value() ? *factory : EluFeatureMapFactory();
  TORCH_CHECK(static_cast<bool>(chosen.make), "feature map factory '", chosen.name, "' is empty");
  FeatureMapPtr feature_map = chosen.make(query_dimensions);
  TORCH_CHECK(feature_map != nullptr, "feature map factory '", chosen.name,
              "' returned no feature map");
  return feature_map;
}

LinearAttentionImpl::LinearAttentionImpl(int64_t query_dimensions,
                                         std::optional<NamedFeatureMapFactory> feature_map,
                                         double eps, std::string event_dispatcher)
    : feature_map_(MakeLinearAttentionFeatureMap(query_dimensions, feature_map)),
      eps_(eps),
      event_dispatcher_(std::move(event_dispatcher)) {
  register_module("feature_map", feature_map_);
}

torch::Tensor LinearAttentionImpl::forward(const torch::Tensor& queries, const torch::Tensor& keys,
                                           const torch::Tensor& values, const Mask& attn_mask,
                                           const Mask& /*query_lengths*/, const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
              "LinearAttention expects queries (N,L,H,E), keys (N,S,H,E) and values (N,S,H,D)");
  // Redrawn before the mask check, as in the reference (same RNG use).
  feature_map_->new_feature_map(queries.device());
  torch::Tensor phi_q = feature_map_->forward_queries(queries);
  torch::Tensor phi_k = feature_map_->forward_keys(keys);
  TORCH_CHECK(attn_mask.all_ones(), "LinearAttention does not support arbitrary attention masks");
  phi_k =
      phi_k * key_lengths.float_matrix().to(phi_k.device()).index({Slice(), Slice(), None, None});
  // (N, L, H, .) -> (N, H, L, .) views for the kernel (a CUDA kernel on a
  // GPU; BLAS tensor ops, differentiable, on the CPU).
  return LinearAttentionProduct(phi_q.transpose(1, 2), phi_k.transpose(1, 2),
                                values.transpose(1, 2), eps_)
      .transpose(1, 2)
      .contiguous();
}

std::optional<ParamValue> LinearAttentionImpl::attribute(const std::string& name) const {
  if (name == "eps") return ParamValue(eps_);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return SubmoduleAttribute(*this, name);
}

absl::Status RegisterLinearAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register("linear", "LinearAttention",
                           {{"query_dimensions", ap::QueryDimensions()},
                            {"feature_map", ap::FeatureMap()},
                            {"event_dispatcher", ap::EventDispatcher()}},
                           [](const std::vector<AttentionPtr>& /*positional*/,
                              const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
                             const ParamValue& factory = params.at("feature_map");
                             std::optional<NamedFeatureMapFactory> feature_map;
                             if (factory.is_factory()) feature_map = factory.as_factory();
                             return ap::Construct<AttentionImpl>([&] {
                               return std::make_shared<LinearAttentionImpl>(
                                   ap::Int(params, "query_dimensions"), feature_map, 1e-6,
                                   ap::String(params, "event_dispatcher"));
                             });
                           },
                           {"query_dimensions", "feature_map", "eps", "event_dispatcher"});
}

torch::Tensor LinearAttentionProduct(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                     const torch::Tensor& values, double eps) {
  return kernels::LinearAttentionForward(phi_q, phi_k, values, eps);
}

}  // namespace performer
