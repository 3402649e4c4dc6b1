// Recurrent (one time step at a time) attention contracts and the states
// they carry between steps, as fast-transformers' recurrent attentions.
//
// Inputs are single time steps without a sequence axis. A state of
// std::monostate means "new sequence" (Python's state=None); the module fills
// it on the first call and updates it on every call.
//
// State layouts (F = feature-map size, t = steps so far):
//   RecurrentFullState        keys (N,H,t,E), values (N,H,t,D)   grows with t
//   RecurrentLinearState      kv = S = sum phi(k) v^T (N,H,F,D), normalizer = Z = sum phi(k)
//   (N,H,F) CrossFullState            keys (N,S,H,E), values (N,S,H,D)   the projected memory
//   CrossLinearState          kv (N,H,D,F) (transposed w.r.t. self!), normalizer (N,H,F)
// A user-registered attention may keep any list of tensors.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <variant>
#include <vector>

#include "core/introspection.h"
#include "core/masks.h"
#include "core/recurrent/slot_state.h"

namespace performer {

struct RecurrentFullState {
  torch::Tensor keys;    // (N, H, t, E)
  torch::Tensor values;  // (N, H, t, D)
};

struct RecurrentLinearState {
  torch::Tensor kv;          // S: (N, H, F, D)
  torch::Tensor normalizer;  // Z: (N, H, F)
};

struct CrossFullState {
  torch::Tensor keys;    // (N, S, H, E)
  torch::Tensor values;  // (N, S, H, D)
};

struct CrossLinearState {
  torch::Tensor kv;          // (N, H, D, F)
  torch::Tensor normalizer;  // (N, H, F)
};

using AttentionState = std::variant<std::monostate, RecurrentFullState, RecurrentLinearState,
                                    CrossFullState, CrossLinearState, std::vector<torch::Tensor>>;

// The state as the reference library's list of tensors (element 0, 1, ...);
// empty for a new sequence.
inline std::vector<torch::Tensor> StateTensors(const AttentionState& state) {
  struct Visitor {
    std::vector<torch::Tensor> operator()(const std::monostate&) const { return {}; }
    std::vector<torch::Tensor> operator()(const RecurrentFullState& s) const {
      return {s.keys, s.values};
    }
    std::vector<torch::Tensor> operator()(const RecurrentLinearState& s) const {
      return {s.kv, s.normalizer};
    }
    std::vector<torch::Tensor> operator()(const CrossFullState& s) const {
      return {s.keys, s.values};
    }
    std::vector<torch::Tensor> operator()(const CrossLinearState& s) const {
      return {s.kv, s.normalizer};
    }
    std::vector<torch::Tensor> operator()(const std::vector<torch::Tensor>& s) const { return s; }
  };
  return std::visit(Visitor{}, state);
}

inline bool IsNewSequence(const AttentionState& state) {
  return std::holds_alternative<std::monostate>(state);
}

// Recurrent self attention: query (N,H,E), key (N,H,E), value (N,H,D) of the
// current step -> (N,H,D); implicitly causal.
//
// The slot form (slot_state.h) is what a server decodes with: an attention
// that has one returns its per-sequence tensors from SlotStateSpec and
// advances a batch of pool rows with ForwardSlots. One without (the default)
// cannot be served; a user-registered attention gets served by overriding
// both.
class RecurrentAttentionImpl : public torch::nn::Module, public Introspectable {
 public:
  virtual torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& key,
                                const torch::Tensor& value, AttentionState& state) = 0;

  // The tensors one sequence keeps; empty when there is no slot form.
  virtual std::vector<SlotTensorSpec> SlotStateSpec(const SlotShape& shape) const;
  // queries, keys [N, n, H, E], values [N, n, H, D]: the next n tokens of the
  // N rows -> [N, n, H, D]. Causal: token i of row r sees its row's past and
  // tokens 0..i of the call. Updates rows.tensors in place (not positions:
  // the caller advances them once for the whole stack). Inference only.
  virtual torch::Tensor ForwardSlots(const torch::Tensor& queries, const torch::Tensor& keys,
                                     const torch::Tensor& values, SlotRows& rows);
};

// Recurrent cross attention: query (N,H,E) -> (N,H,D). keys (N,S,H,E) and
// values (N,S,H,D) are used only when the state is new; afterwards they may
// be undefined and are ignored. key_lengths (N x S length mask) is read on the
// first step by every attention and, as in the reference, at every step by
// cross full attention (its softmax masks the padded memory each time).
class RecurrentCrossAttentionImpl : public torch::nn::Module, public Introspectable {
 public:
  virtual torch::Tensor forward(const torch::Tensor& query, const torch::Tensor& keys,
                                const torch::Tensor& values, const Mask& key_lengths,
                                AttentionState& state) = 0;
};

using RecurrentAttentionPtr = std::shared_ptr<RecurrentAttentionImpl>;
using RecurrentCrossAttentionPtr = std::shared_ptr<RecurrentCrossAttentionImpl>;

}  // namespace performer
