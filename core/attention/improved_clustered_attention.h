// ImprovedClusteredAttention ("improved-clustered"): clustered attention
// refined with exact scores on each cluster's top-k keys (Vyas et al., 2020,
// fast-transformers' ImprovedClusteredAttention).
//
// Per sample n and head h, with t the softmax temperature and k' = min(topk, S):
//   1. cluster the queries and form centroids q̄_c as in ClusteredAttention
//      (core/attention/query_clustering.h);
//   2. sc_c[s] = q̄_c . k_s + key_add[n, s]; T_c = the k' keys with the largest
//      sc_c (any order);
//   3. bottom part: A_c = softmax_s(t sc_c) with the entries of T_c zeroed,
//      m_c = sum_s A_c[s] (the mass outside the top-k); every member query
//      receives sum_{s not in T_c} A_c[s] v_s;
//   4. top part: member query i computes exact scores q_i . k_j for j in T_c,
//      a_i = softmax_j(t q_i . k_j) (1 - m_c), and receives sum_j a_ij v_j;
//   5. output = top + bottom; queries past query_lengths[n] receive exactly 0.
// With topk >= S this is exact softmax attention for every query.
//
// Deliberate deviation (reference defect P-IC3,
// docs/reference/fast-transformers.md §11): the reference re-masks the exact
// top-k scores with -inf where the top-k list of (head 0, cluster 0) holds a
// padded key, for every head and cluster, so other heads can attend padded
// keys. Here a top-k slot is masked iff its own key index is a padded key of
// that sample (key_lengths), so the result equals full attention whenever
// topk >= S, with or without key lengths.
//
// Parameters (constructor defaults; the registry's are in brackets):
//   clusters           number of query clusters C (required; 1 <= C <= L)
//   iterations = 10    Lloyd iterations of the Hamming k-means
//   bits = 32 [63]     hash bits, in [1, 63]
//   hash_bias = true   random offsets on the hyperplanes
//   topk = 32          keys per cluster attended exactly (>= 0)
//   softmax_temp = None  t; None (or 0) means 1/sqrt(E)
//   attention_dropout = 0.1  dropout on both attention parts (submodule "dropout")
//   event_dispatcher = ""    dispatcher key; this attention emits no event
//
// Masks: attn_mask must be all ones; query_lengths must be a length mask;
// key_lengths applied additively on the centroid scores and by key index on
// the exact scores. Inputs queries (N,L,H,E), keys (N,S,H,E), values
// (N,S,H,D); output (N,L,H,D). Differentiable with respect to queries, keys
// and values (the top-k selection itself is piecewise constant).
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/attention/attention.h"
#include "core/attention/attention_registries.h"

namespace performer {

struct ImprovedClusteredAttentionOptions {
  int64_t clusters = 1;
  int64_t iterations = 10;
  int64_t bits = 32;
  bool hash_bias = true;
  int64_t topk = 32;
  std::optional<double> softmax_temp;
  double attention_dropout = 0.1;
  std::string event_dispatcher;
};

class ImprovedClusteredAttentionImpl : public AttentionImpl {
 public:
  explicit ImprovedClusteredAttentionImpl(ImprovedClusteredAttentionOptions options);

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "ImprovedClusteredAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;
  const ImprovedClusteredAttentionOptions& options() const { return options_; }

 private:
  ImprovedClusteredAttentionOptions options_;
  torch::nn::Dropout dropout_{nullptr};
};

// Registers "improved-clustered" with parameters clusters (Int), iterations
// (Optional(Int, 10)), bits (Optional(Int, 63)), hash_bias (Optional(Bool,
// True)), topk (Optional(Int, 32)), softmax_temp (Optional(Float)),
// attention_dropout (Optional(Float, 0.1)), event_dispatcher
// (Optional(EventDispatcherInstance, "")).
absl::Status RegisterImprovedClusteredAttention(AttentionRegistry& registry);

// Shared with the causal variant: the registry parameters of the improved
// clustered attentions, in registration order, and their options.
std::vector<std::pair<std::string, ParamSpecPtr>> ImprovedClusteredParameterSpecs();
ImprovedClusteredAttentionOptions ImprovedClusteredOptionsFromParams(const ParamMap& params);
// The validation shared by both constructors (TORCH_CHECK, named `attention`).
void CheckImprovedClusteredOptions(const char* attention,
                                   const ImprovedClusteredAttentionOptions& options);
// The attribute() of both improved clustered attentions.
std::optional<ParamValue> ImprovedClusteredAttribute(const ImprovedClusteredAttentionOptions& o,
                                                     const torch::nn::Dropout& dropout,
                                                     const std::string& name);

}  // namespace performer
