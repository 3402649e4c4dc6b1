#include "core/attention/causal_linear_attention.h"

#include <torch/torch.h>

#include "core/attention/attention_parameters.h"
#include "core/attention/linear_attention.h"
#include "core/attention/module_attributes.h"
#include "kernels/causal_product.h"

namespace performer {

using torch::indexing::None;
using torch::indexing::Slice;

namespace {

// (N,L,H,C) -> (N,H,L,C), contiguous, as the kernel wants.
torch::Tensor HeadsFirst(const torch::Tensor& x) { return x.permute({0, 2, 1, 3}).contiguous(); }

// x (N,S,H,C) cut or zero-padded along the sequence axis to `length` rows.
torch::Tensor FitSequence(const torch::Tensor& x, int64_t length) {
  const int64_t current = x.size(1);
  if (current == length) return x;
  if (current > length) return x.slice(1, 0, length);
  return torch::cat({x, x.new_zeros({x.size(0), length - current, x.size(2), x.size(3)})}, 1);
}

}  // namespace

CausalLinearAttentionImpl::CausalLinearAttentionImpl(
    int64_t query_dimensions, std::optional<NamedFeatureMapFactory> feature_map, double eps,
    std::string event_dispatcher)
    : feature_map_(MakeLinearAttentionFeatureMap(query_dimensions, feature_map)),
      eps_(eps),
      event_dispatcher_(std::move(event_dispatcher)) {
  register_module("feature_map", feature_map_);
}

torch::Tensor CausalLinearAttentionImpl::forward(const torch::Tensor& queries,
                                                 const torch::Tensor& keys,
                                                 const torch::Tensor& values, const Mask& attn_mask,
                                                 const Mask& /*query_lengths*/,
                                                 const Mask& key_lengths) {
  TORCH_CHECK(
      queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
      "CausalLinearAttention expects queries (N,L,H,E), keys (N,S,H,E) and values (N,S,H,D)");
  feature_map_->new_feature_map(queries.device());
  torch::Tensor phi_q = feature_map_->forward_queries(queries);
  torch::Tensor phi_k = feature_map_->forward_keys(keys);
  TORCH_CHECK(attn_mask.lower_triangular(),
              "CausalLinearAttention only supports full lower triangular masks");
  phi_k =
      phi_k * key_lengths.float_matrix().to(phi_k.device()).index({Slice(), Slice(), None, None});

  const int64_t length = phi_q.size(1);
  phi_k = FitSequence(phi_k, length);
  const torch::Tensor fitted_values = FitSequence(values, length);

  torch::Tensor z = 1 / (torch::einsum("nlhi,nlhi->nlh", {phi_q, phi_k.cumsum(1)}) + eps_);
  torch::Tensor numerator =
      CausalLinearNumerator(HeadsFirst(phi_q), HeadsFirst(phi_k), HeadsFirst(fitted_values))
          .permute({0, 2, 1, 3})
          .contiguous();
  return numerator * z.index({Slice(), Slice(), Slice(), None});
}

std::optional<ParamValue> CausalLinearAttentionImpl::attribute(const std::string& name) const {
  if (name == "eps") return ParamValue(eps_);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return SubmoduleAttribute(*this, name);
}

absl::Status RegisterCausalLinearAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register("causal-linear", "CausalLinearAttention",
                           {{"query_dimensions", ap::QueryDimensions()},
                            {"feature_map", ap::FeatureMap()},
                            {"event_dispatcher", ap::EventDispatcher()}},
                           [](const std::vector<AttentionPtr>& /*positional*/,
                              const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
                             const ParamValue& factory = params.at("feature_map");
                             std::optional<NamedFeatureMapFactory> feature_map;
                             if (factory.is_factory()) feature_map = factory.as_factory();
                             return ap::Construct<AttentionImpl>([&] {
                               return std::make_shared<CausalLinearAttentionImpl>(
                                   ap::Int(params, "query_dimensions"), feature_map, 1e-6,
                                   ap::String(params, "event_dispatcher"));
                             });
                           },
                           {"query_dimensions", "feature_map", "eps", "event_dispatcher"});
}

torch::Tensor CausalLinearNumerator(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                    const torch::Tensor& values) {
  return kernels::CausalDotProduct(phi_q, phi_k, values);
}

}  // namespace performer
