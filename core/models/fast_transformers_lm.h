// FastTransformersLM: the language model a fast-transformers user builds
// around the library's builders (docs/models.md, "FastTransformersLM"):
//
//   token_emb : Embedding(num_tokens, d_model)     d_model = n_heads * value_dimensions
//   pos_emb   : Embedding(max_seq_len, d_model)    learned positions 0, 1, 2, ...
//   encoder   : TransformerEncoderBuilder.from_kwargs(**encoder).get()
//   to_logits : Linear(d_model, num_tokens)
//   logits    = to_logits(encoder(token_emb(x) + pos_emb(arange(L)),
//                                 attn_mask=TriangularCausalMask(L)))
//
// Decoding runs the recurrent twin of the same weights
// (RecurrentEncoderBuilder.from_kwargs(**encoder), parameters shared with the
// batch encoder by MakeMirror, buffers such as a feature map's omega copied)
// through the slot form of its attentions (core/recurrent/slot_state.h): any
// attention registered with a recurrent slot form serves, a user's included.
// Random feature maps are sampled once when the model is built (then
// loaded from the weights) and frozen: never resampled.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/recurrent/slot_state.h"
#include "core/transformers/recurrent_transformers.h"
#include "core/transformers/transformers.h"

namespace performer::models {

struct FastTransformersLMConfig {
  int64_t num_tokens = 0;
  int64_t max_seq_len = 0;
  // The builder's keyword arguments, the feature map as the library's
  // {"factory": <class>, "kwargs": {...}} (config.json's {"type": <class>,
  // <kwargs>...} and "elu" are translated by the parser).
  nlohmann::json encoder;
};

// config.json: "num_tokens", "max_seq_len" and "encoder" (see above). Bounds:
// num_tokens <= 2^24, max_seq_len <= 2^20, n_layers <= 1024, each dimension
// <= 65536, every other integer of the encoder kwargs (feature counts,
// clusters, windows...) within +-2^20; the encoder kwargs must build.
absl::StatusOr<FastTransformersLMConfig> ParseFastTransformersLMConfig(const nlohmann::json& json);

// A lower bound on the parameter and buffer elements of the model `config`
// describes (token and position embeddings, the output projection, each
// layer's feed-forward), all of which the weights file stores; InvalidArgument
// when the builder refuses the encoder kwargs.
absl::StatusOr<uint64_t> MinimumParameterElements(const FastTransformersLMConfig& config);

class FastTransformersLMImpl : public torch::nn::Module {
 public:
  // InvalidArgument when the builders refuse the encoder kwargs (unknown
  // attention type, bad parameter) or the attention has no recurrent twin.
  static absl::StatusOr<std::shared_ptr<FastTransformersLMImpl>> Create(
      const FastTransformersLMConfig& config);

  // tokens [N, L] int64 -> logits [N, L, num_tokens], the batch forward.
  torch::Tensor forward(const torch::Tensor& tokens);

  // Ties the recurrent twin to the current weights, on their device, with
  // the linear layers of both converted to `weight_dtype` (kFloat,
  // kBFloat16, kChar: core/attention/linear_weights.h) and shared. Call
  // after loading weights and after moving the model.
  void PrepareForDecoding(torch::ScalarType weight_dtype = torch::kFloat);
  // The per-sequence state of the recurrent twin (a StatePool's layout) for
  // sequences of up to max_seq_len tokens. A layer whose attention has no
  // slot form has an empty list (SlotFormMissing names it).
  std::vector<std::vector<SlotTensorSpec>> SlotStateSpecs() const;
  // The class of the first recurrent attention without a slot form, or "".
  std::string SlotFormMissing() const;
  // tokens [N, n] int64, the next n tokens of N pool rows (rows[i] is layer
  // i's; all share positions) -> logits [N, n, num_tokens]. Advances the
  // rows' positions by n.
  torch::Tensor ForwardSlots(const torch::Tensor& tokens, std::vector<SlotRows>& rows);

  const FastTransformersLMConfig& config() const { return config_; }

  torch::nn::Embedding token_emb{nullptr};
  torch::nn::Embedding pos_emb{nullptr};
  TransformerEncoderPtr encoder;
  torch::nn::Linear to_logits{nullptr};

 private:
  FastTransformersLMImpl(const FastTransformersLMConfig& config, int64_t d_model,
                         TransformerEncoderPtr encoder, RecurrentTransformerEncoderPtr recurrent);

  FastTransformersLMConfig config_;
  RecurrentTransformerEncoderPtr recurrent_;  // not registered: shares the encoder's weights
};

using FastTransformersLM = std::shared_ptr<FastTransformersLMImpl>;

}  // namespace performer::models
