// ClusteredAttention ("clustered"): softmax attention computed once per
// cluster of queries (Vyas et al., 2020, fast-transformers'
// ClusteredAttention).
//
// Per sample n and head h, with t the softmax temperature:
//   1. queries are hashed with `bits` random hyperplanes (drawn anew on every
//      forward) and the first query_lengths[n] codes are grouped into
//      `clusters` clusters by `iterations` rounds of Hamming k-means
//      (core/attention/query_clustering.h);
//   2. each cluster c gets the mean of its member queries, q̄_c;
//   3. A_c = softmax_s(t (q̄_c . k_s + key_add[n, s])),  V_c = sum_s A_c[s] v_s;
//   4. every member query receives V_c; queries past query_lengths[n] receive
//      exactly 0.
// Cost O(N H C S (E + D)) instead of O(N H L S (E + D)).
//
// Parameters (constructor defaults; the registry's are in brackets):
//   clusters           number of query clusters C (required; 1 <= C <= L)
//   iterations = 10    Lloyd iterations of the Hamming k-means
//   bits = 32 [63]     hash bits, in [1, 63]
//   hash_bias = true   random offsets on the hyperplanes (Hamming distance
//                      tracks L2 distance); false: cosine distance
//   softmax_temp = None  t; None (or 0) means 1/sqrt(E)
//   attention_dropout = 0.1  dropout on A_c (submodule "dropout")
//   event_dispatcher = ""    dispatcher key; this attention emits no event
//
// Masks: attn_mask must be all ones; query_lengths must be a length mask;
// key_lengths is applied additively (-inf on padded keys). Inputs are
// queries (N,L,H,E), keys (N,S,H,E), values (N,S,H,D); output (N,L,H,D).
// Randomness comes from torch's default generator (see query_clustering.h).
// Differentiable with respect to queries, keys and values (CPU kernels).
#pragma once

#include <torch/nn/modules/dropout.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "core/attention/attention.h"
#include "core/attention/attention_registries.h"

namespace performer {

struct ClusteredAttentionOptions {
  int64_t clusters = 1;
  int64_t iterations = 10;
  int64_t bits = 32;
  bool hash_bias = true;
  std::optional<double> softmax_temp;
  double attention_dropout = 0.1;
  std::string event_dispatcher;
};

class ClusteredAttentionImpl : public AttentionImpl {
 public:
  explicit ClusteredAttentionImpl(ClusteredAttentionOptions options);

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "ClusteredAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;
  const ClusteredAttentionOptions& options() const { return options_; }

 private:
  ClusteredAttentionOptions options_;
  torch::nn::Dropout dropout_{nullptr};
};

// Registers "clustered" with parameters clusters (Int), iterations
// (Optional(Int, 10)), bits (Optional(Int, 63)), hash_bias (Optional(Bool,
// True)), softmax_temp (Optional(Float)), attention_dropout (Optional(Float,
// 0.1)), event_dispatcher (Optional(EventDispatcherInstance, "")).
absl::Status RegisterClusteredAttention(AttentionRegistry& registry);

}  // namespace performer
