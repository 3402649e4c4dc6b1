#include "core/recurrent/recurrent_full_attention.h"

#include <torch/torch.h>

#include <limits>

#include "core/attention/attention.h"
#include "core/recurrent/key_value_slots.h"
#include "core/registry/param_spec.h"
#include "kernels/causal_softmax_attention.h"

namespace performer {
namespace {

std::optional<ParamValue> FullAttentionAttribute(const std::string& name,
                                                 const std::optional<double>& softmax_temp,
                                                 const torch::nn::Dropout& dropout,
                                                 const std::string& event_dispatcher) {
  if (name == "softmax_temp") return softmax_temp ? ParamValue(*softmax_temp) : ParamValue();
  if (name == "dropout.p" || name == "attention_dropout") {
    return ParamValue(dropout->options.p());
  }
  if (name == "event_dispatcher") return ParamValue(event_dispatcher);
  return std::nullopt;
}

std::optional<double> OptionalFloat(const ParamValue& v) {
  if (v.is_none()) return std::nullopt;
  return v.as_float();
}

std::vector<std::pair<std::string, ParamSpecPtr>> FullAttentionSpecs() {
  return {{"softmax_temp", OptionalSpec(FloatSpec())},
          {"attention_dropout", OptionalSpec(FloatSpec(), 0.1)},
          {"event_dispatcher", OptionalSpec(EventDispatcherInstanceSpec(), "")}};
}

}  // namespace

RecurrentFullAttentionImpl::RecurrentFullAttentionImpl(std::optional<double> softmax_temp,
                                                       double attention_dropout,
                                                       std::string event_dispatcher)
    : softmax_temp_(softmax_temp), event_dispatcher_(std::move(event_dispatcher)) {
  dropout_ = register_module("dropout", torch::nn::Dropout(attention_dropout));
}

torch::Tensor RecurrentFullAttentionImpl::forward(const torch::Tensor& query,
                                                  const torch::Tensor& key,
                                                  const torch::Tensor& value,
                                                  AttentionState& state) {
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
              "RecurrentFullAttention expects query/key (N,H,E) and value (N,H,D)");
  const double temp = SoftmaxTemperature(softmax_temp_, query.size(2));
  torch::Tensor keys;
  torch::Tensor values;
  if (IsNewSequence(state)) {
    keys = key.unsqueeze(2);
    values = value.unsqueeze(2);
  } else {
    auto* full = std::get_if<RecurrentFullState>(&state);
    TORCH_CHECK(full != nullptr, "RecurrentFullAttention got a state of another attention type");
    TORCH_CHECK(full->keys.size(0) == query.size(0),
                "The batch size changed during iteration (state ", full->keys.size(0), ", input ",
                query.size(0), ")");
    keys = torch::cat({full->keys, key.unsqueeze(2)}, 2);
    values = torch::cat({full->values, value.unsqueeze(2)}, 2);
  }
  // (N,H,t,E) x (N,H,E,1) -> (N,H,t)
  torch::Tensor scores = torch::matmul(keys, query.unsqueeze(-1)).squeeze(-1);
  torch::Tensor attention = dropout_->forward(torch::softmax(temp * scores, -1));
  torch::Tensor out = torch::matmul(attention.unsqueeze(-2), values).squeeze(-2);
  state = RecurrentFullState{keys, values};
  return out;
}

std::vector<SlotTensorSpec> RecurrentFullAttentionImpl::SlotStateSpec(
    const SlotShape& shape) const {
  return KeyValueSlotSpec(shape);
}

torch::Tensor RecurrentFullAttentionImpl::ForwardSlots(const torch::Tensor& queries,
                                                       const torch::Tensor& keys,
                                                       const torch::Tensor& values,
                                                       SlotRows& rows) {
  const double temp = SoftmaxTemperature(softmax_temp_, queries.size(-1));
  KeyValueWindow window = AppendKeyValues(keys, values, rows);
  if (!torch::GradMode::is_enabled() && (!is_training() || dropout_->options.p() == 0.0) &&
      kernels::CausalSoftmaxAttentionSupported(window.keys, window.values)) {
    // A token's attention in one chain of operations over its visible keys
    // alone, whatever its call's other tokens and rows (a prompt's chunking,
    // a step's batch): the same bits however its sequence is fed.
    return kernels::CausalSoftmaxAttention(queries, window.keys, window.values, window.last, temp);
  }
  torch::Tensor scores = torch::einsum("nlhe,nthe->nhlt", {queries, window.keys}) * temp;
  scores.masked_fill_(window.Visible().logical_not(), -std::numeric_limits<float>::infinity());
  torch::Tensor attention = dropout_->forward(torch::softmax(scores, -1));
  return torch::einsum("nhlt,nthd->nlhd", {attention, window.values});
}

std::optional<ParamValue> RecurrentFullAttentionImpl::attribute(const std::string& name) const {
  return FullAttentionAttribute(name, softmax_temp_, dropout_, event_dispatcher_);
}

RecurrentCrossFullAttentionImpl::RecurrentCrossFullAttentionImpl(std::optional<double> softmax_temp,
                                                                 double attention_dropout,
                                                                 std::string event_dispatcher)
    : softmax_temp_(softmax_temp), event_dispatcher_(std::move(event_dispatcher)) {
  dropout_ = register_module("dropout", torch::nn::Dropout(attention_dropout));
}

torch::Tensor RecurrentCrossFullAttentionImpl::forward(const torch::Tensor& query,
                                                       const torch::Tensor& keys,
                                                       const torch::Tensor& values,
                                                       const Mask& key_lengths,
                                                       AttentionState& state) {
  TORCH_CHECK(query.dim() == 3, "RecurrentCrossFullAttention expects a query (N,H,E)");
  torch::Tensor memory_keys;
  torch::Tensor memory_values;
  if (IsNewSequence(state)) {
    TORCH_CHECK(keys.defined() && values.defined() && keys.dim() == 4 && values.dim() == 4,
                "RecurrentCrossFullAttention needs keys (N,S,H,E) and values (N,S,H,D) on the "
                "first step");
    memory_keys = keys;
    memory_values = values;
  } else {
    auto* cross = std::get_if<CrossFullState>(&state);
    TORCH_CHECK(cross != nullptr,
                "RecurrentCrossFullAttention got a state of another attention type");
    memory_keys = cross->keys;
    memory_values = cross->values;
  }
  const int64_t n = query.size(0);
  const int64_t s = memory_keys.size(1);
  TORCH_CHECK(memory_keys.size(0) == n, "The batch size changed during iteration (state ",
              memory_keys.size(0), ", input ", n, ")");
  TORCH_CHECK(key_lengths.shape() == std::vector<int64_t>({n, s}),
              "RecurrentCrossFullAttention: key_lengths must be an N x S mask (", n, " x ", s, ")");
  const double temp = SoftmaxTemperature(softmax_temp_, query.size(2));
  // (N,S,H,E) . (N,1,H,E) -> (N,S,H)
  torch::Tensor scores = (memory_keys * query.unsqueeze(1)).sum(-1);
  scores = scores +
           key_lengths.additive_matrix().to(scores.device(), scores.scalar_type()).unsqueeze(-1);
  torch::Tensor attention = dropout_->forward(torch::softmax(temp * scores, 1));
  // (N,S,H,1) * (N,S,H,D) summed over S -> (N,H,D)
  torch::Tensor out = (attention.unsqueeze(-1) * memory_values).sum(1);
  if (IsNewSequence(state)) state = CrossFullState{memory_keys, memory_values};
  return out;
}

std::optional<ParamValue> RecurrentCrossFullAttentionImpl::attribute(
    const std::string& name) const {
  return FullAttentionAttribute(name, softmax_temp_, dropout_, event_dispatcher_);
}

absl::Status RegisterRecurrentFullAttention(RecurrentAttentionRegistry& registry) {
  return registry.Register("full", "RecurrentFullAttention", FullAttentionSpecs(),
                           [](const std::vector<RecurrentAttentionPtr>&,
                              const ParamMap& p) -> absl::StatusOr<RecurrentAttentionPtr> {
                             return std::make_shared<RecurrentFullAttentionImpl>(
                                 OptionalFloat(p.at("softmax_temp")),
                                 p.at("attention_dropout").as_float(),
                                 p.at("event_dispatcher").as_string());
                           });
}

absl::Status RegisterRecurrentCrossFullAttention(RecurrentCrossAttentionRegistry& registry) {
  return registry.Register("full", "RecurrentCrossFullAttention", FullAttentionSpecs(),
                           [](const std::vector<RecurrentCrossAttentionPtr>&,
                              const ParamMap& p) -> absl::StatusOr<RecurrentCrossAttentionPtr> {
                             return std::make_shared<RecurrentCrossFullAttentionImpl>(
                                 OptionalFloat(p.at("softmax_temp")),
                                 p.at("attention_dropout").as_float(),
                                 p.at("event_dispatcher").as_string());
                           });
}

}  // namespace performer
