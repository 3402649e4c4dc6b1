#include "core/transformers/recurrent_transformers.h"

#include <torch/torch.h>

#include "core/attention/linear_rows.h"
#include "core/attention/row_norm.h"

namespace performer {
namespace {

std::optional<ParamValue> LayerAttribute(const std::string& name, const torch::nn::Dropout& dropout,
                                         Activation activation, int64_t d_model, int64_t d_ff) {
  if (name == "dropout.p") return ParamValue(dropout->options.p());
  if (name == "activation") return ParamValue(ActivationName(activation));
  if (name == "d_model") return ParamValue(d_model);
  if (name == "d_ff") return ParamValue(d_ff);
  return std::nullopt;
}

// The memory length S of the default memory_length_mask: the memory's when
// it is given; else (memory already folded into the cross state) the one of
// a cross full state, whose softmax masks with it at every step; other cross
// states do not read the mask any more and get an empty one.
int64_t DefaultMemoryLength(const torch::Tensor& memory, const AttentionState& cross_state) {
  if (memory.defined()) {
    TORCH_CHECK(memory.dim() == 3, "RecurrentTransformerDecoder expects memory (N, S, d_mem)");
    return memory.size(1);
  }
  TORCH_CHECK(!IsNewSequence(cross_state),
              "RecurrentTransformerDecoder needs the memory on the first step");
  if (const auto* full = std::get_if<CrossFullState>(&cross_state)) return full->keys.size(1);
  return 0;
}

void AddStateTensors(const std::string& prefix, const AttentionState& state,
                     std::map<std::string, torch::Tensor>& out) {
  const std::vector<torch::Tensor> tensors = StateTensors(state);
  for (size_t j = 0; j < tensors.size(); ++j) out[prefix + std::to_string(j)] = tensors[j];
}

}  // namespace

std::map<std::string, torch::Tensor> NamedStateTensors(const RecurrentEncoderState& state) {
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < state.layers.size(); ++i) {
    AddStateTensors("layers." + std::to_string(i) + ".", state.layers[i], out);
  }
  return out;
}

std::map<std::string, torch::Tensor> NamedStateTensors(const RecurrentDecoderState& state) {
  std::map<std::string, torch::Tensor> out;
  for (size_t i = 0; i < state.layers.size(); ++i) {
    const std::string prefix = "layers." + std::to_string(i) + ".";
    AddStateTensors(prefix + "self.", state.layers[i].self, out);
    AddStateTensors(prefix + "cross.", state.layers[i].cross, out);
  }
  return out;
}

RecurrentTransformerEncoderLayerImpl::RecurrentTransformerEncoderLayerImpl(
    RecurrentAttentionLayerPtr attention_layer, int64_t d_model, std::optional<int64_t> d_ff,
    double dropout_p, const std::string& activation)
    : d_model_(d_model),
      d_ff_(FeedForwardDims(d_ff, d_model)),
      activation_(ParseActivation(activation)) {
  TORCH_CHECK(attention_layer != nullptr,
              "RecurrentTransformerEncoderLayer needs an attention layer");
  attention = register_module("attention", std::move(attention_layer));
  linear1 = register_module("linear1", torch::nn::Linear(d_model_, d_ff_));
  linear2 = register_module("linear2", torch::nn::Linear(d_ff_, d_model_));
  norm1 = register_module("norm1", MakeLayerNorm(d_model_));
  norm2 = register_module("norm2", MakeLayerNorm(d_model_));
  dropout = register_module("dropout", torch::nn::Dropout(dropout_p));
}

torch::Tensor RecurrentTransformerEncoderLayerImpl::forward(const torch::Tensor& x,
                                                            AttentionState& state) {
  TORCH_CHECK(x.dim() == 2,
              "RecurrentTransformerEncoderLayer expects one time step x (N, d_model)");
  return AfterAttention(x, attention->forward(x, x, x, state));
}

torch::Tensor RecurrentTransformerEncoderLayerImpl::ForwardSlots(const torch::Tensor& x,
                                                                 SlotRows& rows) {
  return AfterAttention(x, attention->ForwardSlots(x, rows));
}

torch::Tensor RecurrentTransformerEncoderLayerImpl::AfterAttention(const torch::Tensor& x,
                                                                   const torch::Tensor& attended) {
  // ApplyLinear and LayerNormRows: the modules' forwards under autograd,
  // each row computed alone in inference (core/attention/linear_rows.h,
  // core/attention/row_norm.h).
  torch::Tensor h = LayerNormRows(norm1, x + dropout->forward(attended));
  torch::Tensor y = dropout->forward(ApplyActivation(activation_, ApplyLinear(linear1, h)));
  y = dropout->forward(ApplyLinear(linear2, y));
  return LayerNormRows(norm2, h + y);
}

std::optional<ParamValue> RecurrentTransformerEncoderLayerImpl::attribute(
    const std::string& name) const {
  return LayerAttribute(name, dropout, activation_, d_model_, d_ff_);
}

RecurrentTransformerDecoderLayerImpl::RecurrentTransformerDecoderLayerImpl(
    RecurrentAttentionLayerPtr self_attention_layer,
    RecurrentCrossAttentionLayerPtr cross_attention_layer, int64_t d_model,
    std::optional<int64_t> d_ff, double dropout_p, const std::string& activation)
    : d_model_(d_model),
      d_ff_(FeedForwardDims(d_ff, d_model)),
      activation_(ParseActivation(activation)) {
  TORCH_CHECK(self_attention_layer != nullptr && cross_attention_layer != nullptr,
              "RecurrentTransformerDecoderLayer needs a self and a cross attention layer");
  self_attention = register_module("self_attention", std::move(self_attention_layer));
  cross_attention = register_module("cross_attention", std::move(cross_attention_layer));
  linear1 = register_module("linear1", torch::nn::Linear(d_model_, d_ff_));
  linear2 = register_module("linear2", torch::nn::Linear(d_ff_, d_model_));
  norm1 = register_module("norm1", MakeLayerNorm(d_model_));
  norm2 = register_module("norm2", MakeLayerNorm(d_model_));
  norm3 = register_module("norm3", MakeLayerNorm(d_model_));
  dropout = register_module("dropout", torch::nn::Dropout(dropout_p));
}

torch::Tensor RecurrentTransformerDecoderLayerImpl::forward(
    const torch::Tensor& x, const torch::Tensor& memory,
    const std::optional<Mask>& memory_length_mask, RecurrentDecoderLayerState& state) {
  TORCH_CHECK(x.dim() == 2,
              "RecurrentTransformerDecoderLayer expects one time step x (N, d_model)");
  const Mask memory_lengths =
      memory_length_mask
          ? *memory_length_mask
          : DefaultLengthMask(x.size(0), DefaultMemoryLength(memory, state.cross), x.device());
  torch::Tensor h =
      norm1->forward(x + dropout->forward(self_attention->forward(x, x, x, state.self)));
  h = norm2->forward(h + dropout->forward(cross_attention->forward(h, memory, memory,
                                                                   memory_lengths, state.cross)));
  torch::Tensor y = dropout->forward(ApplyActivation(activation_, ForwardLinear(linear1, h)));
  y = dropout->forward(ForwardLinear(linear2, y));
  return norm3->forward(h + y);
}

std::optional<ParamValue> RecurrentTransformerDecoderLayerImpl::attribute(
    const std::string& name) const {
  return LayerAttribute(name, dropout, activation_, d_model_, d_ff_);
}

RecurrentTransformerEncoderImpl::RecurrentTransformerEncoderImpl(
    std::vector<RecurrentTransformerEncoderLayerPtr> layers, torch::nn::LayerNorm norm_layer)
    : layers_(std::move(layers)) {
  auto list = register_module("layers", torch::nn::ModuleList());
  for (const RecurrentTransformerEncoderLayerPtr& layer : layers_) {
    TORCH_CHECK(layer != nullptr, "RecurrentTransformerEncoder got a null layer");
    list->push_back(layer);
  }
  if (!norm_layer.is_empty()) norm_ = register_module("norm", std::move(norm_layer));
}

torch::Tensor RecurrentTransformerEncoderImpl::forward(const torch::Tensor& x,
                                                       RecurrentEncoderState& state) {
  if (state.layers.empty()) state.layers.resize(layers_.size());
  TORCH_CHECK(state.layers.size() == layers_.size(), "RecurrentTransformerEncoder: the state has ",
              state.layers.size(), " layers, the model ", layers_.size());
  torch::Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i]->forward(h, state.layers[i]);
  return norm_.is_empty() ? h : norm_->forward(h);
}

std::vector<std::vector<SlotTensorSpec>> RecurrentTransformerEncoderImpl::SlotStateSpecs(
    int64_t max_length) const {
  std::vector<std::vector<SlotTensorSpec>> specs;
  for (const RecurrentTransformerEncoderLayerPtr& layer : layers_) {
    specs.push_back(layer->attention->SlotStateSpec(max_length));
  }
  return specs;
}

torch::Tensor RecurrentTransformerEncoderImpl::ForwardSlots(const torch::Tensor& x,
                                                            std::vector<SlotRows>& rows) {
  TORCH_CHECK(rows.size() == layers_.size(), "RecurrentTransformerEncoder: ", rows.size(),
              " layers of slot rows for ", layers_.size(), " layers");
  torch::Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) h = layers_[i]->ForwardSlots(h, rows[i]);
  return norm_.is_empty() ? h : LayerNormRows(norm_, h);
}

RecurrentTransformerDecoderImpl::RecurrentTransformerDecoderImpl(
    std::vector<RecurrentTransformerDecoderLayerPtr> layers, torch::nn::LayerNorm norm_layer)
    : layers_(std::move(layers)) {
  auto list = register_module("layers", torch::nn::ModuleList());
  for (const RecurrentTransformerDecoderLayerPtr& layer : layers_) {
    TORCH_CHECK(layer != nullptr, "RecurrentTransformerDecoder got a null layer");
    list->push_back(layer);
  }
  if (!norm_layer.is_empty()) norm_ = register_module("norm", std::move(norm_layer));
}

torch::Tensor RecurrentTransformerDecoderImpl::forward(
    const torch::Tensor& x, const torch::Tensor& memory,
    const std::optional<Mask>& memory_length_mask, RecurrentDecoderState& state) {
  if (state.layers.empty()) state.layers.resize(layers_.size());
  TORCH_CHECK(state.layers.size() == layers_.size(), "RecurrentTransformerDecoder: the state has ",
              state.layers.size(), " layers, the model ", layers_.size());
  torch::Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    h = layers_[i]->forward(h, memory, memory_length_mask, state.layers[i]);
  }
  return norm_.is_empty() ? h : norm_->forward(h);
}

}  // namespace performer
