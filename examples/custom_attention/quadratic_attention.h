// A custom attention, written as a fast-transformers user writes one, and
// served: "square" attention, whose weights are a quadratic kernel of the
// query-key products,
//
//   w[l, s]  = (t * q_l . k_s)^2 * mask[l, s] * keep[s]     (multiplicative masks)
//   out_l    = sum_s w[l, s] v_s / (sum_s w[l, s] + eps)
//
// with t = quadratic_temp (default 1.0) and eps (default 1e-6), both declared
// in its parameter spec so that builders and config.json set them.
//
// QuadraticAttention is the batch form (AttentionImpl): any attn_mask, key
// lengths. RecurrentQuadraticAttention is its recurrent twin: it keeps every
// past key and value, as recurrent full attention does, one step at a time
// (forward with an AttentionState) and in a server's slot pool (SlotStateSpec
// / ForwardSlots over core/recurrent/key_value_slots.h), which is what makes
// a FastTransformersLM with attention_type "square" servable.
//
// RegisterQuadraticAttention puts both in the registries under "square"; a
// program calls it before loading models (serve_custom_attention.cc).
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/attention/attention_registries.h"

namespace performer::examples {

class QuadraticAttentionImpl : public AttentionImpl {
 public:
  explicit QuadraticAttentionImpl(double quadratic_temp = 1.0, double eps = 1e-6)
      : quadratic_temp_(quadratic_temp), eps_(eps) {}

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "QuadraticAttention"; }
  // quadratic_temp, eps.
  std::optional<ParamValue> attribute(const std::string& name) const override;

 private:
  double quadratic_temp_;
  double eps_;
};

class RecurrentQuadraticAttentionImpl : public RecurrentAttentionImpl {
 public:
  explicit RecurrentQuadraticAttentionImpl(double quadratic_temp = 1.0, double eps = 1e-6)
      : quadratic_temp_(quadratic_temp), eps_(eps) {}

  // query, key (N, H, E), value (N, H, D) of one step -> (N, H, D); the
  // state is a RecurrentFullState that grows by one key and value.
  torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key,
                        const torch::Tensor& value, AttentionState& state) override;
  std::vector<SlotTensorSpec> SlotStateSpec(const SlotShape& shape) const override;
  torch::Tensor ForwardSlots(const torch::Tensor& queries, const torch::Tensor& keys,
                             const torch::Tensor& values, SlotRows& rows) override;

  std::string class_name() const override { return "RecurrentQuadraticAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

 private:
  double quadratic_temp_;
  double eps_;
};

// Registers "square" in a batch and in a recurrent registry, as the
// library's attentions do (the registries' errors are returned as they are).
absl::Status RegisterQuadraticAttention(AttentionRegistry& registry);
absl::Status RegisterRecurrentQuadraticAttention(RecurrentAttentionRegistry& registry);
// Both on the process-wide registries (what builders and model folders
// use), each where it is not registered yet.
absl::Status RegisterQuadraticAttentionGlobally();

}  // namespace performer::examples
