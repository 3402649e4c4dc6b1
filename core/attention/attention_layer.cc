#include "core/attention/attention_layer.h"

#include <torch/torch.h>

#include "core/attention/linear_rows.h"

namespace performer {

AttentionLayerImpl::AttentionLayerImpl(AttentionPtr attention, int64_t d_model, int64_t n_heads,
                                       std::optional<int64_t> d_keys,
                                       std::optional<int64_t> d_values,
                                       std::optional<int64_t> d_model_keys)
    : inner_attention_(std::move(attention)),
      d_model_(d_model),
      n_heads_(n_heads),
      d_keys_(d_keys.value_or(DefaultHeadDims(d_model, n_heads))),
      d_values_(d_values.value_or(DefaultHeadDims(d_model, n_heads))),
      d_model_keys_(d_model_keys.value_or(d_model)) {
  TORCH_CHECK(inner_attention_ != nullptr, "AttentionLayer needs an inner attention");
  TORCH_CHECK(n_heads_ > 0 && d_keys_ > 0 && d_values_ > 0,
              "AttentionLayer: n_heads, d_keys and d_values must be positive (got ", n_heads_, ", ",
              d_keys_, ", ", d_values_, ")");
  // Registration order is the Python state_dict order.
  register_module("inner_attention", inner_attention_);
  query_projection =
      register_module("query_projection", torch::nn::Linear(d_model_, d_keys_ * n_heads_));
  key_projection =
      register_module("key_projection", torch::nn::Linear(d_model_keys_, d_keys_ * n_heads_));
  value_projection =
      register_module("value_projection", torch::nn::Linear(d_model_keys_, d_values_ * n_heads_));
  out_projection =
      register_module("out_projection", torch::nn::Linear(d_values_ * n_heads_, d_model_));
}

torch::Tensor AttentionLayerImpl::forward(const torch::Tensor& queries, const torch::Tensor& keys,
                                          const torch::Tensor& values, const Mask& attn_mask,
                                          const Mask& query_lengths, const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 3 && keys.dim() == 3 && values.dim() == 3,
              "AttentionLayer expects queries (N,L,d_model) and keys/values (N,S,d_model_keys)");
  const int64_t n = queries.size(0);
  const int64_t l = queries.size(1);
  const int64_t s = keys.size(1);
  const int64_t h = n_heads_;
  torch::Tensor q = ForwardLinear(query_projection, queries).reshape({n, l, h, -1});
  torch::Tensor k = ForwardLinear(key_projection, keys).reshape({n, s, h, -1});
  torch::Tensor v = ForwardLinear(value_projection, values).reshape({n, s, h, -1});
  torch::Tensor attended =
      inner_attention_->forward(q, k, v, attn_mask, query_lengths, key_lengths).reshape({n, l, -1});
  return ForwardLinear(out_projection, attended);
}

std::optional<ParamValue> AttentionLayerImpl::attribute(const std::string& name) const {
  if (name == "n_heads") return ParamValue(n_heads_);
  if (name == "d_model") return ParamValue(d_model_);
  if (name == "d_keys") return ParamValue(d_keys_);
  if (name == "d_values") return ParamValue(d_values_);
  if (name == "d_model_keys") return ParamValue(d_model_keys_);
  return std::nullopt;
}

}  // namespace performer
