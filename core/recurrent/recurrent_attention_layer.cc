#include "core/recurrent/recurrent_attention_layer.h"

#include <torch/torch.h>

#include "core/attention/attention_layer.h"
#include "core/attention/linear_rows.h"

namespace performer {
namespace {

// The four projections of an attention layer, registered in the Python
// state_dict order after "inner_attention".
template <typename Layer>
void RegisterProjections(Layer& layer, int64_t d_model, int64_t n_heads, int64_t d_keys,
                         int64_t d_values, int64_t d_model_keys) {
  TORCH_CHECK(n_heads > 0 && d_keys > 0 && d_values > 0,
              "attention layer: n_heads, d_keys and d_values must be positive (got ", n_heads, ", ",
              d_keys, ", ", d_values, ")");
  layer.query_projection =
      layer.register_module("query_projection", torch::nn::Linear(d_model, d_keys * n_heads));
  layer.key_projection =
      layer.register_module("key_projection", torch::nn::Linear(d_model_keys, d_keys * n_heads));
  layer.value_projection = layer.register_module(
      "value_projection", torch::nn::Linear(d_model_keys, d_values * n_heads));
  layer.out_projection =
      layer.register_module("out_projection", torch::nn::Linear(d_values * n_heads, d_model));
}

std::optional<ParamValue> LayerAttribute(const std::string& name, int64_t n_heads, int64_t d_model,
                                         int64_t d_keys, int64_t d_values, int64_t d_model_keys) {
  if (name == "n_heads") return ParamValue(n_heads);
  if (name == "d_model") return ParamValue(d_model);
  if (name == "d_keys") return ParamValue(d_keys);
  if (name == "d_values") return ParamValue(d_values);
  if (name == "d_model_keys") return ParamValue(d_model_keys);
  return std::nullopt;
}

}  // namespace

RecurrentAttentionLayerImpl::RecurrentAttentionLayerImpl(RecurrentAttentionPtr attention,
                                                         int64_t d_model, int64_t n_heads,
                                                         std::optional<int64_t> d_keys,
                                                         std::optional<int64_t> d_values,
                                                         std::optional<int64_t> d_model_keys)
    : inner_attention_(std::move(attention)),
      d_model_(d_model),
      n_heads_(n_heads),
      d_keys_(d_keys.value_or(DefaultHeadDims(d_model, n_heads))),
      d_values_(d_values.value_or(DefaultHeadDims(d_model, n_heads))),
      d_model_keys_(d_model_keys.value_or(d_model)) {
  TORCH_CHECK(inner_attention_ != nullptr, "RecurrentAttentionLayer needs an inner attention");
  register_module("inner_attention", inner_attention_);
  RegisterProjections(*this, d_model_, n_heads_, d_keys_, d_values_, d_model_keys_);
}

torch::Tensor RecurrentAttentionLayerImpl::forward(const torch::Tensor& query,
                                                   const torch::Tensor& key,
                                                   const torch::Tensor& value,
                                                   AttentionState& state) {
  TORCH_CHECK(query.dim() == 2 && key.dim() == 2 && value.dim() == 2,
              "RecurrentAttentionLayer expects one time step: query/key/value (N, d_model)");
  const int64_t n = query.size(0);
  const int64_t h = n_heads_;
  torch::Tensor q = ForwardLinear(query_projection, query).reshape({n, h, -1});
  torch::Tensor k = ForwardLinear(key_projection, key).reshape({n, h, -1});
  torch::Tensor v = ForwardLinear(value_projection, value).reshape({n, h, -1});
  torch::Tensor attended = inner_attention_->forward(q, k, v, state).reshape({n, -1});
  return ForwardLinear(out_projection, attended);
}

std::vector<SlotTensorSpec> RecurrentAttentionLayerImpl::SlotStateSpec(int64_t max_length) const {
  return inner_attention_->SlotStateSpec({n_heads_, d_keys_, d_values_, max_length});
}

torch::Tensor RecurrentAttentionLayerImpl::ForwardSlots(const torch::Tensor& x, SlotRows& rows) {
  TORCH_CHECK(x.dim() == 3, "RecurrentAttentionLayer::ForwardSlots expects x (N, n, d_model)");
  const int64_t batch = x.size(0), n = x.size(1), h = n_heads_;
  torch::Tensor q = ApplyLinear(query_projection, x).view({batch, n, h, -1});
  torch::Tensor k = ApplyLinear(key_projection, x).view({batch, n, h, -1});
  torch::Tensor v = ApplyLinear(value_projection, x).view({batch, n, h, -1});
  torch::Tensor attended = inner_attention_->ForwardSlots(q, k, v, rows).reshape({batch, n, -1});
  return ApplyLinear(out_projection, attended);
}

std::optional<ParamValue> RecurrentAttentionLayerImpl::attribute(const std::string& name) const {
  return LayerAttribute(name, n_heads_, d_model_, d_keys_, d_values_, d_model_keys_);
}

RecurrentCrossAttentionLayerImpl::RecurrentCrossAttentionLayerImpl(
    RecurrentCrossAttentionPtr attention, int64_t d_model, int64_t n_heads,
    std::optional<int64_t> d_keys, std::optional<int64_t> d_values,
    std::optional<int64_t> d_model_keys)
    : inner_attention_(std::move(attention)),
      d_model_(d_model),
      n_heads_(n_heads),
      d_keys_(d_keys.value_or(DefaultHeadDims(d_model, n_heads))),
      d_values_(d_values.value_or(DefaultHeadDims(d_model, n_heads))),
      d_model_keys_(d_model_keys.value_or(d_model)) {
  TORCH_CHECK(inner_attention_ != nullptr, "RecurrentCrossAttentionLayer needs an inner attention");
  register_module("inner_attention", inner_attention_);
  RegisterProjections(*this, d_model_, n_heads_, d_keys_, d_values_, d_model_keys_);
}

torch::Tensor RecurrentCrossAttentionLayerImpl::forward(const torch::Tensor& query,
                                                        const torch::Tensor& keys,
                                                        const torch::Tensor& values,
                                                        const Mask& key_lengths,
                                                        AttentionState& state) {
  TORCH_CHECK(query.dim() == 2,
              "RecurrentCrossAttentionLayer expects one time step: query (N, d_model)");
  const int64_t n = query.size(0);
  const int64_t h = n_heads_;
  torch::Tensor q = ForwardLinear(query_projection, query).reshape({n, h, -1});
  torch::Tensor k;
  torch::Tensor v;
  if (IsNewSequence(state)) {
    TORCH_CHECK(keys.defined() && values.defined() && keys.dim() == 3 && values.dim() == 3,
                "RecurrentCrossAttentionLayer needs the memory keys/values (N, S, d_model_keys) "
                "on the first step");
    const int64_t s = keys.size(1);
    k = ForwardLinear(key_projection, keys).reshape({n, s, h, -1});
    v = ForwardLinear(value_projection, values).reshape({n, s, h, -1});
  }
  torch::Tensor attended = inner_attention_->forward(q, k, v, key_lengths, state).reshape({n, -1});
  return ForwardLinear(out_projection, attended);
}

std::optional<ParamValue> RecurrentCrossAttentionLayerImpl::attribute(
    const std::string& name) const {
  return LayerAttribute(name, n_heads_, d_model_, d_keys_, d_values_, d_model_keys_);
}

}  // namespace performer
