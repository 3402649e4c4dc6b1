// ImprovedClusteredCausalAttention ("causal-improved-clustered"): the causal
// form of improved clustered attention (fast-transformers'
// ImprovedClusteredCausalAttention). Only the top-k part exists.
//
// Per sample n and head h, with t the softmax temperature and
// k' = min(topk, min_n key_lengths[n]):
//   1. cluster the queries and form centroids q̄_c as in ClusteredAttention
//      (core/attention/query_clustering.h);
//   2. sc_c[s] = q̄_c . k_s + key_add[n, s]; T_c = the k' keys with the largest
//      sc_c (any order);
//   3. member query i at position p_i computes exact scores q_i . k_j for
//      j in T_c; slots with j > p_i (the future) are set to -1e7 before the
//      softmax a_i = softmax_j(t scores) and multiplied by 0 after it, without
//      renormalisation (as the reference): a query whose k' keys all lie in
//      its future receives 0;
//   4. output_i = sum_j a_ij v_j; queries past query_lengths[n] receive 0.
// With topk >= L (and full lengths) this is exact causal softmax attention.
// Clustering and the top-k choice see all queries, so output l may depend on
// later queries (never on later values).
//
// Parameters (constructor defaults; the registry's are in brackets): as
// ImprovedClusteredAttention: clusters (required), iterations = 10,
// bits = 32 [63], hash_bias = true, topk = 32, softmax_temp = None
// (1/sqrt(E)), attention_dropout = 0.1 (submodule "dropout"),
// event_dispatcher = "" (no event is emitted).
//
// Masks: attn_mask must be lower_triangular (masks.h; L x S); query_lengths
// and key_lengths must be length masks (key_lengths additive on the centroid
// scores). Inputs queries (N,L,H,E), keys (N,S,H,E), values (N,S,H,D); output
// (N,L,H,D). Differentiable with respect to queries, keys and values.
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention.h"
#include "core/attention/attention_registries.h"
#include "core/attention/improved_clustered_attention.h"

namespace performer {

class ImprovedClusteredCausalAttentionImpl : public AttentionImpl {
 public:
  explicit ImprovedClusteredCausalAttentionImpl(ImprovedClusteredAttentionOptions options);

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "ImprovedClusteredCausalAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;
  const ImprovedClusteredAttentionOptions& options() const { return options_; }

 private:
  ImprovedClusteredAttentionOptions options_;
  torch::nn::Dropout dropout_{nullptr};
};

// Registers "causal-improved-clustered" with the parameters of
// "improved-clustered" (see RegisterImprovedClusteredAttention).
absl::Status RegisterImprovedClusteredCausalAttention(AttentionRegistry& registry);

}  // namespace performer
