// CausalLinearAttention ("causal-linear"): causally masked linear attention
// in O(N L F D) time with the causal-product kernel:
//
//   phi_q = feature_map.forward_queries(q),  phi_k = feature_map.forward_keys(k) * keep[n,s]
//   out[n,l,h] = sum_{j<=l} (phi_q_l . phi_k_j) v_j / (phi_q_l . sum_{j<=l} phi_k_j + eps)
//
// feature_map.new_feature_map(device) is called at every forward (see
// LinearAttention). attn_mask must be lower_triangular (decided through its
// lengths, so a FullMask holding a lower-triangular matrix passes), otherwise
// forward fails with "CausalLinearAttention only supports full lower
// triangular masks". keep = key_lengths.float_matrix; query_lengths is
// ignored. A query whose prefix holds only padded keys gives 0 (0 / eps).
//
// Sequence lengths: when L < S only the first L keys and values are used.
// When L > S the reference zero-pads phi_k but not the values, so its kernel
// reads past the values; here the values are zero-padded as well. Padded keys
// are zero, so the result equals the reference wherever the reference reads
// finite memory: out_l for l >= S attends to all S keys.
//
// Parameters (registry name "causal-linear"):
//   query_dimensions  Int, required
//   feature_map       Optional(Callable), default None = elu(x) + 1
//   eps               1e-6 (constructor only)
//   event_dispatcher  Optional(EventDispatcherInstance), default "" (stored only)
//
// Submodule "feature_map". Attributes: eps, event_dispatcher,
// feature_map.<attribute>.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"
#include "core/feature_maps/feature_map.h"

namespace performer {

class CausalLinearAttentionImpl : public AttentionImpl {
 public:
  // feature_map == nullopt means EluFeatureMapFactory().
  explicit CausalLinearAttentionImpl(
      int64_t query_dimensions, std::optional<NamedFeatureMapFactory> feature_map = std::nullopt,
      double eps = 1e-6, std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "CausalLinearAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const FeatureMapPtr& feature_map() const { return feature_map_; }
  double eps() const { return eps_; }

 private:
  FeatureMapPtr feature_map_;
  double eps_;
  std::string event_dispatcher_;
};

// The causal numerator of linear attention over feature-mapped queries and
// keys, heads first: phi_q, phi_k [N, H, L, F], values [N, H, L, D] ->
// sum_{j<=l} (phi_q_l . phi_k_j) v_j [N, H, L, D], differentiable (the
// causal-product kernel and its own backward, kernels/causal_product.h).
torch::Tensor CausalLinearNumerator(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                    const torch::Tensor& values);

// Registers "causal-linear" with parameters query_dimensions, feature_map,
// event_dispatcher.
absl::Status RegisterCausalLinearAttention(AttentionRegistry& registry);

}  // namespace performer
