// Linear attention one step at a time: RecurrentLinearAttention (self) and
// RecurrentCrossLinearAttention (cross), as fast-transformers'
// recurrent.attention.{self,cross}_attention.linear_attention.
//
// Self (registered as both "linear" and "causal-linear" in the recurrent
// registry), step with query q, key k (N,H,E), value v (N,H,D), phi the
// feature map (F features):
//   S <- S + phi(k) v^T     (N,H,F,D)     state RecurrentLinearState {kv = S, normalizer = Z}
//   Z <- Z + phi(k)         (N,H,F)
//   out = (phi(q) . S) / (phi(q) . Z + eps)        (N,H,D)
// On a new sequence the feature map is resampled (new_feature_map) and the
// state starts at zero; later steps never resample. S and Z are updated in
// place when no autograd graph is involved (the tensors of the state passed
// in are mutated: constant memory and no copy per step); when grad mode is on
// and the key, value or state require grad, the update is out of place so
// that training through the recurrence works. A batch size different from
// the state's is an error.
//
// Cross (registered as "linear" in the recurrent cross registry), memory
// keys (N,S,H,E) and values (N,S,H,D), on the first call only:
//   phi_k = phi(K) * keep[n,s]                     (key_lengths float matrix)
//   KV = sum_s v_s phi_k_s^T   (N,H,D,F)   -- transposed w.r.t. the self state
//   Z  = sum_s phi_k_s         (N,H,F)     state CrossLinearState {kv, normalizer}
// every call: out = (KV . phi(q)) / (phi(q) . Z + eps). Once the state
// exists, keys, values and key_lengths are not read (the memory is folded
// into a constant-size summary).
//
// Parameters (Python defaults):
//   query_dimensions  E, the feature map's input size (required)
//   feature_map       a feature-map factory, default elu(x) + 1
//   eps               1e-6, added to the denominator only (not a registry parameter)
//   event_dispatcher  kept for introspection; no events are dispatched
// Registry parameters: query_dimensions Int, feature_map Optional(Callable),
// event_dispatcher Optional(EventDispatcherInstance, "").
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"
#include "core/feature_maps/feature_map.h"
#include "core/recurrent/recurrent_attention.h"
#include "core/registry/param_value.h"

namespace performer {

class RecurrentLinearAttentionImpl : public RecurrentAttentionImpl {
 public:
  explicit RecurrentLinearAttentionImpl(int64_t query_dimensions,
                                        std::optional<NamedFeatureMapFactory> feature_map = {},
                                        double eps = 1e-6, std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key,
                        const torch::Tensor& value, AttentionState& state) override;
  // Slot form: one tensor [H, F, D + 1] per sequence, S with Z as its last
  // column (the layout of kernels/causal_linear_prefill.h), advanced by n
  // tokens with one chunkwise causal product from the stored state. The
  // feature map is never resampled here (serving loads it frozen).
  std::vector<SlotTensorSpec> SlotStateSpec(const SlotShape& shape) const override;
  torch::Tensor ForwardSlots(const torch::Tensor& queries, const torch::Tensor& keys,
                             const torch::Tensor& values, SlotRows& rows) override;

  std::string class_name() const override { return "RecurrentLinearAttention"; }
  // query_dimensions, eps, event_dispatcher.
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const FeatureMapPtr& feature_map() const { return feature_map_; }

 private:
  int64_t query_dimensions_;
  double eps_;
  std::string event_dispatcher_;
  FeatureMapPtr feature_map_;
};

class RecurrentCrossLinearAttentionImpl : public RecurrentCrossAttentionImpl {
 public:
  explicit RecurrentCrossLinearAttentionImpl(int64_t query_dimensions,
                                             std::optional<NamedFeatureMapFactory> feature_map = {},
                                             double eps = 1e-6, std::string event_dispatcher = "");

  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& key_lengths,
                        AttentionState& state) override;

  std::string class_name() const override { return "RecurrentCrossLinearAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  const FeatureMapPtr& feature_map() const { return feature_map_; }

 private:
  int64_t query_dimensions_;
  double eps_;
  std::string event_dispatcher_;
  FeatureMapPtr feature_map_;
};

// Registers "linear" and "causal-linear" (the same class) in the recurrent
// registry, and "linear" in the recurrent cross registry.
absl::Status RegisterRecurrentLinearAttention(RecurrentAttentionRegistry& registry);
absl::Status RegisterRecurrentCrossLinearAttention(RecurrentCrossAttentionRegistry& registry);

}  // namespace performer
