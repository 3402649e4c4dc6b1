// The inner-attention contract shared by every batch attention type.
//
// An inner attention takes already-projected multi-head tensors in the
// fast-transformers layout and returns the attended values:
//
//   queries (N, L, H, E), keys (N, S, H, E), values (N, S, H, D) -> (N, L, H, D)
//
// with three masks: attn_mask (L x S, one matrix for the whole batch),
// query_lengths (an N x L length mask) and key_lengths (an N x S length
// mask). Projections to heads are done by AttentionLayer. Invalid inputs for a
// given attention (e.g. a non-causal mask for causal-linear) raise c10::Error
// through TORCH_CHECK with a message naming the problem.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cmath>
#include <memory>
#include <optional>

#include "core/introspection.h"
#include "core/masks.h"

namespace performer {

class AttentionImpl : public torch::nn::Module, public Introspectable {
 public:
  virtual torch::Tensor forward(const torch::Tensor& queries, const torch::Tensor& keys,
                                const torch::Tensor& values, const Mask& attn_mask,
                                const Mask& query_lengths, const Mask& key_lengths) = 0;
};

using AttentionPtr = std::shared_ptr<AttentionImpl>;

// The default temperature of softmax attentions: 1/sqrt(E). A temperature of
// 0 means "not set", as with Python's `softmax_temp or 1/sqrt(E)`.
inline double SoftmaxTemperature(const std::optional<double>& softmax_temp, int64_t query_dims) {
  if (softmax_temp.has_value() && *softmax_temp != 0.0) return *softmax_temp;
  return 1.0 / std::sqrt(static_cast<double>(query_dims));
}

}  // namespace performer
