// LinearAttention ("linear"): attention with a feature map phi in place of
// the softmax kernel, O(N L F D):
//
//   phi_q = feature_map.forward_queries(q),  phi_k = feature_map.forward_keys(k) * keep[n,s]
//   out[n,l,h] = (phi_q_l . sum_s phi_k_s v_s^T) / (phi_q_l . sum_s phi_k_s + eps)
//
// feature_map.new_feature_map(device) is called at the start of every
// forward, as in the reference, so random feature maps are redrawn at every
// call (also in eval mode) unless they are frozen or deterministic_eval.
// keep = key_lengths.float_matrix (padded keys contribute nothing). The
// attn_mask must be all ones, otherwise forward fails with "LinearAttention
// does not support arbitrary attention masks". query_lengths is ignored.
//
// Parameters (registry name "linear"):
//   query_dimensions  Int, required (E, the size the feature map is built for)
//   feature_map       Optional(Callable), default None = elu(x) + 1
//   eps               1e-6 (constructor only; builders always use 1e-6)
//   event_dispatcher  Optional(EventDispatcherInstance), default "" (stored only)
//
// Submodule "feature_map" (its buffers, e.g. "feature_map.omega", are in the
// state dict). Attributes: eps, event_dispatcher, feature_map.<attribute>.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"
#include "core/feature_maps/feature_map.h"

namespace performer {

class LinearAttentionImpl : public AttentionImpl {
 public:
  // feature_map == nullopt means EluFeatureMapFactory().
  explicit LinearAttentionImpl(int64_t query_dimensions,
                               std::optional<NamedFeatureMapFactory> feature_map = std::nullopt,
                               double eps = 1e-6, std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "LinearAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const FeatureMapPtr& feature_map() const { return feature_map_; }
  double eps() const { return eps_; }

 private:
  FeatureMapPtr feature_map_;
  double eps_;
  std::string event_dispatcher_;
};

// Registers "linear" with parameters query_dimensions, feature_map,
// event_dispatcher.
absl::Status RegisterLinearAttention(AttentionRegistry& registry);

// The product of non-causal linear attention over feature-mapped queries
// and keys, heads first: phi_q [N, H, L, F], phi_k [N, H, S, F], values
// [N, H, S, D] -> phi_q (phi_k^T v) / (phi_q . sum phi_k + eps) [N, H, L, D].
// Every non-causal linear attention runs on it (kernels/linear_attention.h:
// CUDA on a GPU; BLAS tensor ops, differentiable, on the CPU).
torch::Tensor LinearAttentionProduct(const torch::Tensor& phi_q, const torch::Tensor& phi_k,
                                     const torch::Tensor& values, double eps);

// The feature map of a linear attention: `factory` (elu when nullopt) built
// for query_dimensions; fails (c10::Error) when the factory yields nothing.
FeatureMapPtr MakeLinearAttentionFeatureMap(int64_t query_dimensions,
                                            const std::optional<NamedFeatureMapFactory>& factory);

}  // namespace performer
