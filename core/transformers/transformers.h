// Batch transformer layers, as fast-transformers' transformers module.
//
// Every layer is post-norm (residual add, then LayerNorm with eps 1e-5 and
// affine weight/bias); one Dropout module ("dropout") is reused at every
// dropout site; the activation is relu or the exact (erf) gelu.
//
// TransformerEncoderLayer(attention, d_model, d_ff = 4*d_model, dropout = 0.1,
//                         activation = "relu"), forward(x (N,L,d_model),
//                         attn_mask = FullMask(L), length_mask = all-L LengthMask):
//   x = norm1(x + dropout(attention(x, x, x, attn_mask, length_mask, length_mask)))
//   y = dropout(linear2(dropout(act(linear1(x)))))
//   return norm2(x + y)
//
// TransformerDecoderLayer(self_attention, cross_attention, d_model, d_ff,
//                         dropout, activation), forward(x (N,L,d_model),
//                         memory (N,S,d_mem), x_mask = FullMask(L),
//                         x_length_mask = all-L, memory_mask = FullMask(L,S),
//                         memory_length_mask = all-S):
//   x = norm1(x + dropout(self_attention(x, x, x, x_mask, x_length_mask, x_length_mask)))
//   x = norm2(x + dropout(cross_attention(x, memory, memory, memory_mask, x_length_mask,
//                                         memory_length_mask)))
//   y = dropout(linear2(dropout(act(linear1(x)))))
//   return norm3(x + y)
//
// TransformerEncoder / TransformerDecoder(layers, norm_layer = none): the
// same default masks are built once and passed to every layer; the optional
// final LayerNorm is applied at the end. The reference's IntermediateOutput
// events are not dispatched (this port has no event system).
//
// State-dict names (Python's): attention / self_attention / cross_attention,
// linear1 (d_ff, d_model), linear2 (d_model, d_ff), norm1, norm2 (, norm3);
// containers: layers.<i>.*, norm.* (only with a final norm).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/attention/attention_layer.h"
#include "core/introspection.h"
#include "core/masks.h"

namespace performer {

// The feed-forward activation of the transformer layers.
enum class Activation { kRelu, kGelu };

// "relu" or "gelu"; anything else is an error naming it. (The reference's
// batch layers accept any torch.nn.functional name and its recurrent layers
// silently use gelu for any name but "relu"; builders allow only these two.)
Activation ParseActivation(const std::string& name);
const char* ActivationName(Activation activation);
// relu, or the exact gelu x * Phi(x) (erf form, not the tanh approximation).
torch::Tensor ApplyActivation(Activation activation, const torch::Tensor& x);

// d_ff, defaulting (nullopt or 0, Python's `d_ff or 4 * d_model`) to 4 * d_model.
inline int64_t FeedForwardDims(std::optional<int64_t> d_ff, int64_t d_model) {
  return d_ff.value_or(0) != 0 ? *d_ff : 4 * d_model;
}

// The full masks used when a caller passes none: FullMask(l, s) and an
// all-`length` LengthMask of n rows, on `device`.
Mask DefaultAttentionMask(int64_t l, int64_t s, torch::Device device);
Mask DefaultLengthMask(int64_t n, int64_t length, torch::Device device);

class TransformerEncoderLayerImpl : public torch::nn::Module, public Introspectable {
 public:
  TransformerEncoderLayerImpl(AttentionLayerPtr attention, int64_t d_model,
                              std::optional<int64_t> d_ff = std::nullopt, double dropout = 0.1,
                              const std::string& activation = "relu");

  // x (N, L, d_model) -> (N, L, d_model).
  torch::Tensor forward(const torch::Tensor& x, const std::optional<Mask>& attn_mask = std::nullopt,
                        const std::optional<Mask>& length_mask = std::nullopt);

  std::string class_name() const override { return "TransformerEncoderLayer"; }
  // dropout.p, activation ("relu"/"gelu"), d_model, d_ff.
  std::optional<ParamValue> attribute(const std::string& name) const override;

  AttentionLayerPtr attention;
  torch::nn::Linear linear1{nullptr};
  torch::nn::Linear linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  int64_t d_model_;
  int64_t d_ff_;
  Activation activation_;
};

class TransformerDecoderLayerImpl : public torch::nn::Module, public Introspectable {
 public:
  TransformerDecoderLayerImpl(AttentionLayerPtr self_attention, AttentionLayerPtr cross_attention,
                              int64_t d_model, std::optional<int64_t> d_ff = std::nullopt,
                              double dropout = 0.1, const std::string& activation = "relu");

  // x (N, L, d_model), memory (N, S, d_mem) -> (N, L, d_model).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const std::optional<Mask>& x_mask = std::nullopt,
                        const std::optional<Mask>& x_length_mask = std::nullopt,
                        const std::optional<Mask>& memory_mask = std::nullopt,
                        const std::optional<Mask>& memory_length_mask = std::nullopt);

  std::string class_name() const override { return "TransformerDecoderLayer"; }
  std::optional<ParamValue> attribute(const std::string& name) const override;

  AttentionLayerPtr self_attention;
  AttentionLayerPtr cross_attention;
  torch::nn::Linear linear1{nullptr};
  torch::nn::Linear linear2{nullptr};
  torch::nn::LayerNorm norm1{nullptr};
  torch::nn::LayerNorm norm2{nullptr};
  torch::nn::LayerNorm norm3{nullptr};
  torch::nn::Dropout dropout{nullptr};

 private:
  int64_t d_model_;
  int64_t d_ff_;
  Activation activation_;
};

using TransformerEncoderLayerPtr = std::shared_ptr<TransformerEncoderLayerImpl>;
using TransformerDecoderLayerPtr = std::shared_ptr<TransformerDecoderLayerImpl>;

class TransformerEncoderImpl : public torch::nn::Module, public Introspectable {
 public:
  // norm_layer: the final normalization (registered as "norm"), or nullptr.
  explicit TransformerEncoderImpl(std::vector<TransformerEncoderLayerPtr> layers,
                                  torch::nn::LayerNorm norm_layer = nullptr);

  torch::Tensor forward(const torch::Tensor& x, const std::optional<Mask>& attn_mask = std::nullopt,
                        const std::optional<Mask>& length_mask = std::nullopt);

  std::string class_name() const override { return "TransformerEncoder"; }

  const std::vector<TransformerEncoderLayerPtr>& layers() const { return layers_; }
  // Empty (is_empty()) without a final normalization.
  const torch::nn::LayerNorm& norm() const { return norm_; }

 private:
  std::vector<TransformerEncoderLayerPtr> layers_;
  torch::nn::LayerNorm norm_{nullptr};
};

class TransformerDecoderImpl : public torch::nn::Module, public Introspectable {
 public:
  explicit TransformerDecoderImpl(std::vector<TransformerDecoderLayerPtr> layers,
                                  torch::nn::LayerNorm norm_layer = nullptr);

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& memory,
                        const std::optional<Mask>& x_mask = std::nullopt,
                        const std::optional<Mask>& x_length_mask = std::nullopt,
                        const std::optional<Mask>& memory_mask = std::nullopt,
                        const std::optional<Mask>& memory_length_mask = std::nullopt);

  std::string class_name() const override { return "TransformerDecoder"; }

  const std::vector<TransformerDecoderLayerPtr>& layers() const { return layers_; }
  const torch::nn::LayerNorm& norm() const { return norm_; }

 private:
  std::vector<TransformerDecoderLayerPtr> layers_;
  torch::nn::LayerNorm norm_{nullptr};
};

using TransformerEncoderPtr = std::shared_ptr<TransformerEncoderImpl>;
using TransformerDecoderPtr = std::shared_ptr<TransformerDecoderImpl>;

// A LayerNorm over d_model with the reference's eps (1e-5) and affine
// weight/bias: the layers' norms and the containers' final norm.
torch::nn::LayerNorm MakeLayerNorm(int64_t d_model);

}  // namespace performer
