#include "core/transformers/transformers.h"

#include <torch/torch.h>

#include "core/attention/linear_rows.h"

namespace performer {

Activation ParseActivation(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  TORCH_CHECK(name == "gelu", "Unknown activation '", name, "': expected \"relu\" or \"gelu\"");
  return Activation::kGelu;
}

const char* ActivationName(Activation activation) {
  return activation == Activation::kRelu ? "relu" : "gelu";
}

torch::Tensor ApplyActivation(Activation activation, const torch::Tensor& x) {
  // torch::gelu defaults to the exact erf form, like torch.nn.functional.gelu.
  // Inference: each row's GELU the same bits whatever the other rows.
  if (activation == Activation::kRelu) return torch::relu(x);
  return torch::GradMode::is_enabled() ? torch::gelu(x) : GeluRows(x);
}

Mask DefaultAttentionMask(int64_t l, int64_t s, torch::Device device) {
  return Mask::Full(l, s, device);
}

Mask DefaultLengthMask(int64_t n, int64_t length, torch::Device device) {
  return Mask::Lengths(torch::full({n}, length, torch::dtype(torch::kLong).device(device)), length);
}

torch::nn::LayerNorm MakeLayerNorm(int64_t d_model) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({d_model}).eps(1e-5).elementwise_affine(true));
}

namespace {

std::optional<ParamValue> LayerAttribute(const std::string& name, const torch::nn::Dropout& dropout,
                                         Activation activation, int64_t d_model, int64_t d_ff) {
  if (name == "dropout.p") return ParamValue(dropout->options.p());
  if (name == "activation") return ParamValue(ActivationName(activation));
  if (name == "d_model") return ParamValue(d_model);
  if (name == "d_ff") return ParamValue(d_ff);
  return std::nullopt;
}

}  // namespace

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(AttentionLayerPtr attention_layer,
                                                         int64_t d_model,
                                                         std::optional<int64_t> d_ff,
                                                         double dropout_p,
                                                         const std::string& activation)
    : d_model_(d_model),
      d_ff_(FeedForwardDims(d_ff, d_model)),
      activation_(ParseActivation(activation)) {
  TORCH_CHECK(attention_layer != nullptr, "TransformerEncoderLayer needs an attention layer");
  // Registration order is the Python state_dict order.
  attention = register_module("attention", std::move(attention_layer));
  linear1 = register_module("linear1", torch::nn::Linear(d_model_, d_ff_));
  linear2 = register_module("linear2", torch::nn::Linear(d_ff_, d_model_));
  norm1 = register_module("norm1", MakeLayerNorm(d_model_));
  norm2 = register_module("norm2", MakeLayerNorm(d_model_));
  dropout = register_module("dropout", torch::nn::Dropout(dropout_p));
}

torch::Tensor TransformerEncoderLayerImpl::forward(const torch::Tensor& x,
                                                   const std::optional<Mask>& attn_mask,
                                                   const std::optional<Mask>& length_mask) {
  TORCH_CHECK(x.dim() == 3, "TransformerEncoderLayer expects x (N, L, d_model)");
  const int64_t n = x.size(0);
  const int64_t l = x.size(1);
  const Mask mask = attn_mask ? *attn_mask : DefaultAttentionMask(l, l, x.device());
  const Mask lengths = length_mask ? *length_mask : DefaultLengthMask(n, l, x.device());
  torch::Tensor h =
      norm1->forward(x + dropout->forward(attention->forward(x, x, x, mask, lengths, lengths)));
  torch::Tensor y = dropout->forward(ApplyActivation(activation_, ForwardLinear(linear1, h)));
  y = dropout->forward(ForwardLinear(linear2, y));
  return norm2->forward(h + y);
}

std::optional<ParamValue> TransformerEncoderLayerImpl::attribute(const std::string& name) const {
  return LayerAttribute(name, dropout, activation_, d_model_, d_ff_);
}

TransformerDecoderLayerImpl::TransformerDecoderLayerImpl(
    AttentionLayerPtr self_attention_layer, AttentionLayerPtr cross_attention_layer,
    int64_t d_model, std::optional<int64_t> d_ff, double dropout_p, const std::string& activation)
    : d_model_(d_model),
      d_ff_(FeedForwardDims(d_ff, d_model)),
      activation_(ParseActivation(activation)) {
  TORCH_CHECK(self_attention_layer != nullptr && cross_attention_layer != nullptr,
              "TransformerDecoderLayer needs a self and a cross attention layer");
  self_attention = register_module("self_attention", std::move(self_attention_layer));
  cross_attention = register_module("cross_attention", std::move(cross_attention_layer));
  linear1 = register_module("linear1", torch::nn::Linear(d_model_, d_ff_));
  linear2 = register_module("linear2", torch::nn::Linear(d_ff_, d_model_));
  norm1 = register_module("norm1", MakeLayerNorm(d_model_));
  norm2 = register_module("norm2", MakeLayerNorm(d_model_));
  norm3 = register_module("norm3", MakeLayerNorm(d_model_));
  dropout = register_module("dropout", torch::nn::Dropout(dropout_p));
}

torch::Tensor TransformerDecoderLayerImpl::forward(const torch::Tensor& x,
                                                   const torch::Tensor& memory,
                                                   const std::optional<Mask>& x_mask,
                                                   const std::optional<Mask>& x_length_mask,
                                                   const std::optional<Mask>& memory_mask,
                                                   const std::optional<Mask>& memory_length_mask) {
  TORCH_CHECK(x.dim() == 3 && memory.dim() == 3,
              "TransformerDecoderLayer expects x (N, L, d_model) and memory (N, S, d_mem)");
  const int64_t n = x.size(0);
  const int64_t l = x.size(1);
  const int64_t s = memory.size(1);
  const Mask self_mask = x_mask ? *x_mask : DefaultAttentionMask(l, l, x.device());
  const Mask x_lengths = x_length_mask ? *x_length_mask : DefaultLengthMask(n, l, x.device());
  const Mask cross_mask = memory_mask ? *memory_mask : DefaultAttentionMask(l, s, x.device());
  const Mask memory_lengths =
      memory_length_mask ? *memory_length_mask : DefaultLengthMask(n, s, x.device());
  torch::Tensor h = norm1->forward(
      x + dropout->forward(self_attention->forward(x, x, x, self_mask, x_lengths, x_lengths)));
  h = norm2->forward(h + dropout->forward(cross_attention->forward(h, memory, memory, cross_mask,
                                                                   x_lengths, memory_lengths)));
  torch::Tensor y = dropout->forward(ApplyActivation(activation_, ForwardLinear(linear1, h)));
  y = dropout->forward(ForwardLinear(linear2, y));
  return norm3->forward(h + y);
}

std::optional<ParamValue> TransformerDecoderLayerImpl::attribute(const std::string& name) const {
  return LayerAttribute(name, dropout, activation_, d_model_, d_ff_);
}

TransformerEncoderImpl::TransformerEncoderImpl(std::vector<TransformerEncoderLayerPtr> layers,
                                               torch::nn::LayerNorm norm_layer)
    : layers_(std::move(layers)) {
  auto list = register_module("layers", torch::nn::ModuleList());
  for (const TransformerEncoderLayerPtr& layer : layers_) {
    TORCH_CHECK(layer != nullptr, "TransformerEncoder got a null layer");
    list->push_back(layer);
  }
  if (!norm_layer.is_empty()) norm_ = register_module("norm", std::move(norm_layer));
}

torch::Tensor TransformerEncoderImpl::forward(const torch::Tensor& x,
                                              const std::optional<Mask>& attn_mask,
                                              const std::optional<Mask>& length_mask) {
  TORCH_CHECK(x.dim() == 3, "TransformerEncoder expects x (N, L, d_model)");
  const int64_t n = x.size(0);
  const int64_t l = x.size(1);
  const Mask mask = attn_mask ? *attn_mask : DefaultAttentionMask(l, l, x.device());
  const Mask lengths = length_mask ? *length_mask : DefaultLengthMask(n, l, x.device());
  torch::Tensor h = x;
  for (const TransformerEncoderLayerPtr& layer : layers_) h = layer->forward(h, mask, lengths);
  return norm_.is_empty() ? h : norm_->forward(h);
}

TransformerDecoderImpl::TransformerDecoderImpl(std::vector<TransformerDecoderLayerPtr> layers,
                                               torch::nn::LayerNorm norm_layer)
    : layers_(std::move(layers)) {
  auto list = register_module("layers", torch::nn::ModuleList());
  for (const TransformerDecoderLayerPtr& layer : layers_) {
    TORCH_CHECK(layer != nullptr, "TransformerDecoder got a null layer");
    list->push_back(layer);
  }
  if (!norm_layer.is_empty()) norm_ = register_module("norm", std::move(norm_layer));
}

torch::Tensor TransformerDecoderImpl::forward(const torch::Tensor& x, const torch::Tensor& memory,
                                              const std::optional<Mask>& x_mask,
                                              const std::optional<Mask>& x_length_mask,
                                              const std::optional<Mask>& memory_mask,
                                              const std::optional<Mask>& memory_length_mask) {
  TORCH_CHECK(x.dim() == 3 && memory.dim() == 3,
              "TransformerDecoder expects x (N, L, d_model) and memory (N, S, d_mem)");
  const int64_t n = x.size(0);
  const int64_t l = x.size(1);
  const int64_t s = memory.size(1);
  const Mask self_mask = x_mask ? *x_mask : DefaultAttentionMask(l, l, x.device());
  const Mask x_lengths = x_length_mask ? *x_length_mask : DefaultLengthMask(n, l, x.device());
  const Mask cross_mask = memory_mask ? *memory_mask : DefaultAttentionMask(l, s, x.device());
  const Mask memory_lengths =
      memory_length_mask ? *memory_length_mask : DefaultLengthMask(n, s, x.device());
  torch::Tensor h = x;
  for (const TransformerDecoderLayerPtr& layer : layers_) {
    h = layer->forward(h, memory, self_mask, x_lengths, cross_mask, memory_lengths);
  }
  return norm_.is_empty() ? h : norm_->forward(h);
}

}  // namespace performer
