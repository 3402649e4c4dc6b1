// ReformerAttention ("reformer"): shared-QK LSH attention (Kitaev et al.,
// 2020, fast-transformers' ReformerAttention).
//
// The `keys` argument is ignored: keys are the normalised queries
// K_l = q_l / |q_l|, zeroed past key_lengths[n]. With t the softmax
// temperature, the additive mask is
//   M[n,l,s] = key_add[n,s] + (masked ? -1e9 [l = s] : 0) + (attn_mask not all ones ? attn_add[l,s]
//   : 0)
// and each of `rounds` rounds, per (n, h):
//   1. draws planes R ~ N(0, 1) of shape (bits, E); the bucket of position l
//      is argmax over the 2 bits values [K_l R^T, -K_l R^T] (2 bits buckets);
//   2. sorts positions by bucket (ties in any order) and splits them into
//      chunks of chunk_size; each chunk attends to [previous chunk, itself];
//      chunk 0's previous chunk is zero padding masked with -inf (no wrap);
//   3. scores q_l . K_s + M[l, s] (raw queries, normalised keys); a row whose
//      window mask is -inf everywhere has its mask cleared (it then attends
//      all 2 chunk_size window slots, chunk 0's zero padding included);
//      A = softmax(t scores), out = A V, un-permuted.
// The output is the mean over rounds. Only O(L chunk_size) of M is ever
// formed (the reference builds the full L x L mask).
//
// Parameters (constructor defaults; the registry's are in brackets):
//   chunk_size = 32     positions per chunk; L must be a multiple of it
//   bits = 8 [63]       hyperplanes per round (2 bits buckets), >= 1
//   rounds = 4          hashing rounds averaged, >= 1
//   masked = false      forbid attending to oneself (-1e9 on the diagonal)
//   softmax_temp = None t; None (or 0) means 1/sqrt(E)
//   attention_dropout = 0.1  dropout on A (submodule "dropout")
//   event_dispatcher = ""    dispatcher key; this attention emits no event
//
// Requirements (checked): values (N,S,H,D) with S == L and D == E;
// key_lengths N x L; attn_mask L x L; query_lengths ignored. Output
// (N,L,H,E). Hyperplanes come from torch's default CPU generator whatever the
// device (so a seed gives the same buckets on the CPU and on CUDA).
// Differentiable with respect to queries and values.
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

struct ReformerAttentionOptions {
  int64_t chunk_size = 32;
  int64_t bits = 8;
  int64_t rounds = 4;
  bool masked = false;
  std::optional<double> softmax_temp;
  double attention_dropout = 0.1;
  std::string event_dispatcher;
};

class ReformerAttentionImpl : public AttentionImpl {
 public:
  explicit ReformerAttentionImpl(ReformerAttentionOptions options);

  torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                        const torch::Tensor& values, const Mask& attn_mask,
                        const Mask& query_lengths, const Mask& key_lengths) override;

  std::string class_name() const override { return "ReformerAttention"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;
  const ReformerAttentionOptions& options() const { return options_; }

 private:
  // One hashing round: (N,H,L,D) output for queries q, normalised keys k,
  // values v (all (N,H,L,·)) and the pieces of the mask M.
  torch::Tensor Round(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                      const torch::Tensor& key_add, const torch::Tensor& attn_add,
                      double temperature);

  ReformerAttentionOptions options_;
  torch::nn::Dropout dropout_{nullptr};
};

// Registers "reformer" with parameters chunk_size (Optional(Int, 32)), bits
// (Optional(Int, 63)), rounds (Optional(Int, 4)), masked (Optional(Bool,
// False)), softmax_temp (Optional(Float)), attention_dropout (Optional(Float,
// 0.1)), event_dispatcher (Optional(EventDispatcherInstance, "")).
absl::Status RegisterReformerAttention(AttentionRegistry& registry);

}  // namespace performer
