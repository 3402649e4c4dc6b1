#include "core/recurrent/recurrent_linear_attention.h"

#include <torch/torch.h>

#include "core/feature_maps/feature_map_catalogue.h"
#include "core/recurrent/linear_state.h"
#include "core/registry/param_spec.h"
#include "kernels/linear_state_step.h"

namespace performer {
namespace {

FeatureMapPtr MakeFeatureMap(const std::optional<NamedFeatureMapFactory>& factory,
                             int64_t query_dimensions) {
  FeatureMapPtr map =
      factory ? factory->make(query_dimensions) : EluFeatureMapFactory().make(query_dimensions);
  TORCH_CHECK(map != nullptr, "the feature-map factory returned no feature map");
  return map;
}

std::optional<ParamValue> LinearAttentionAttribute(const std::string& name,
                                                   int64_t query_dimensions, double eps,
                                                   const std::string& event_dispatcher) {
  if (name == "query_dimensions") return ParamValue(query_dimensions);
  if (name == "eps") return ParamValue(eps);
  if (name == "event_dispatcher") return ParamValue(event_dispatcher);
  return std::nullopt;
}

std::vector<std::pair<std::string, ParamSpecPtr>> LinearAttentionSpecs() {
  return {{"query_dimensions", IntSpec()},
          {"feature_map", OptionalSpec(CallableSpec())},
          {"event_dispatcher", OptionalSpec(EventDispatcherInstanceSpec(), "")}};
}

// The Python constructor's arguments, eps included (it is not a registry
// parameter), so that composition errors name the right argument.
std::vector<std::string> LinearAttentionConstructorArgs() {
  return {"query_dimensions", "feature_map", "eps", "event_dispatcher"};
}

std::optional<NamedFeatureMapFactory> OptionalFactory(const ParamValue& v) {
  if (v.is_none()) return std::nullopt;
  return v.as_factory();
}

// True when the update must build an autograd graph instead of mutating the
// state: an in-place update would overwrite tensors that earlier steps saved
// for their backward pass (the query's product with S saves S). The
// reference tests only the key and value; testing the query and the state as
// well also covers graphs where only the queries require grad.
bool NeedsOutOfPlaceUpdate(std::initializer_list<const torch::Tensor*> tensors) {
  if (!torch::GradMode::is_enabled()) return false;
  for (const torch::Tensor* t : tensors) {
    if (t->requires_grad()) return true;
  }
  return false;
}

}  // namespace

RecurrentLinearAttentionImpl::RecurrentLinearAttentionImpl(
    int64_t query_dimensions, std::optional<NamedFeatureMapFactory> feature_map, double eps,
    std::string event_dispatcher)
    : query_dimensions_(query_dimensions),
      eps_(eps),
      event_dispatcher_(std::move(event_dispatcher)),
      feature_map_(MakeFeatureMap(feature_map, query_dimensions)) {
  register_module("feature_map", feature_map_);
}

torch::Tensor RecurrentLinearAttentionImpl::forward(const torch::Tensor& query,
                                                    const torch::Tensor& key,
                                                    const torch::Tensor& value,
                                                    AttentionState& state) {
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
              "RecurrentLinearAttention expects query/key (N,H,E) and value (N,H,D)");
  const bool new_sequence = IsNewSequence(state);
  if (new_sequence) feature_map_->new_feature_map(query.device());
  torch::Tensor phi_q = feature_map_->forward_queries(query);  // (N,H,F)
  torch::Tensor phi_k = feature_map_->forward_keys(key);       // (N,H,F)
  const int64_t n = phi_q.size(0);
  torch::Tensor kv;
  torch::Tensor normalizer;
  if (new_sequence) {
    kv = phi_q.new_zeros({n, phi_q.size(1), phi_q.size(2), value.size(2)});
    normalizer = phi_q.new_zeros({n, phi_q.size(1), phi_q.size(2)});
  } else {
    auto* linear = std::get_if<RecurrentLinearState>(&state);
    TORCH_CHECK(linear != nullptr,
                "RecurrentLinearAttention got a state of another attention type");
    kv = linear->kv;
    normalizer = linear->normalizer;
    TORCH_CHECK(kv.size(0) == n, "The batch size changed during iteration (state ", kv.size(0),
                ", input ", n, ")");
  }
  // S += phi(k) v^T, Z += phi(k)
  torch::Tensor outer_k = phi_k.unsqueeze(-1);
  torch::Tensor outer_v = value.unsqueeze(-2);
  if (NeedsOutOfPlaceUpdate({&phi_q, &phi_k, &value, &kv, &normalizer})) {
    normalizer = normalizer + phi_k;
    kv = torch::addcmul(kv, outer_k, outer_v);
  } else {
    normalizer.add_(phi_k);
    kv.addcmul_(outer_k, outer_v);
  }
  torch::Tensor inv_denominator = 1.0 / ((phi_q * normalizer).sum(-1) + eps_);  // (N,H)
  // (N,H,1,F) x (N,H,F,D) -> (N,H,D)
  torch::Tensor out = torch::matmul(phi_q.unsqueeze(-2), kv).squeeze(-2);
  out = out * inv_denominator.unsqueeze(-1);
  state = RecurrentLinearState{kv, normalizer};
  return out;
}

std::vector<SlotTensorSpec> RecurrentLinearAttentionImpl::SlotStateSpec(
    const SlotShape& shape) const {
  return {{{shape.heads, feature_map_->output_dims(), shape.value_dims + 1}, 0.0}};
}

torch::Tensor RecurrentLinearAttentionImpl::ForwardSlots(const torch::Tensor& queries,
                                                         const torch::Tensor& keys,
                                                         const torch::Tensor& values,
                                                         SlotRows& rows) {
  TORCH_CHECK(rows.tensors.size() == 1, "RecurrentLinearAttention's slot state has 1 tensor, got ",
              rows.tensors.size());
  torch::Tensor& state = rows.tensors[0];  // [N, H, F, D + 1]
  const int64_t d = values.size(-1);
  // [N, n, H, *] -> [N, H, n, *]
  torch::Tensor phi_q = feature_map_->forward_queries(queries).transpose(1, 2);
  torch::Tensor phi_k = feature_map_->forward_keys(keys).transpose(1, 2);
  torch::Tensor numerator;
  if (kernels::LinearStateScanSupported(state)) {
    // Token by token (a prompt runs the steps' operations: the same bits).
    const int64_t rows = state.size(0) * state.size(1);
    torch::Tensor flat = state.view({rows, state.size(2), state.size(3)});
    auto by_state = [&](const torch::Tensor& t) {
      return t.contiguous().view({rows, t.size(2), t.size(3)});
    };
    numerator = kernels::LinearStateScan(flat, by_state(phi_q), by_state(phi_k),
                                         by_state(values.transpose(1, 2)))
                    .view({state.size(0), state.size(1), phi_q.size(2), d + 1});
  } else {
    LinearStateAdvance result = AdvanceLinearState(phi_q.contiguous(), phi_k.contiguous(),
                                                   values.transpose(1, 2).contiguous(), state);
    state.copy_(result.final_state);
    numerator = result.out;
  }
  torch::Tensor out = numerator.narrow(-1, 0, d) / (numerator.narrow(-1, d, 1) + eps_);
  return out.transpose(1, 2).to(values.scalar_type());
}

std::optional<ParamValue> RecurrentLinearAttentionImpl::attribute(const std::string& name) const {
  return LinearAttentionAttribute(name, query_dimensions_, eps_, event_dispatcher_);
}

RecurrentCrossLinearAttentionImpl::RecurrentCrossLinearAttentionImpl(
    int64_t query_dimensions, std::optional<NamedFeatureMapFactory> feature_map, double eps,
    std::string event_dispatcher)
    : query_dimensions_(query_dimensions),
      eps_(eps),
      event_dispatcher_(std::move(event_dispatcher)),
      feature_map_(MakeFeatureMap(feature_map, query_dimensions)) {
  register_module("feature_map", feature_map_);
}

torch::Tensor RecurrentCrossLinearAttentionImpl::forward(const torch::Tensor& query,
                                                         const torch::Tensor& keys,
                                                         const torch::Tensor& values,
                                                         const Mask& key_lengths,
                                                         AttentionState& state) {
  TORCH_CHECK(query.dim() == 3, "RecurrentCrossLinearAttention expects a query (N,H,E)");
  const bool new_sequence = IsNewSequence(state);
  if (new_sequence) feature_map_->new_feature_map(query.device());
  torch::Tensor phi_q = feature_map_->forward_queries(query);  // (N,H,F)
  const int64_t n = phi_q.size(0);
  torch::Tensor kv;
  torch::Tensor normalizer;
  if (new_sequence) {
    TORCH_CHECK(keys.defined() && values.defined() && keys.dim() == 4 && values.dim() == 4,
                "RecurrentCrossLinearAttention needs keys (N,S,H,E) and values (N,S,H,D) on the "
                "first step");
    TORCH_CHECK(key_lengths.shape() == std::vector<int64_t>({keys.size(0), keys.size(1)}),
                "RecurrentCrossLinearAttention: key_lengths must be an N x S mask (", keys.size(0),
                " x ", keys.size(1), ")");
    torch::Tensor phi_k = feature_map_->forward_keys(keys);  // (N,S,H,F)
    phi_k = phi_k * key_lengths.float_matrix()
                        .to(phi_k.device(), phi_k.scalar_type())
                        .unsqueeze(-1)
                        .unsqueeze(-1);
    // KV[n,h,d,f] = sum_s v[n,s,h,d] phi_k[n,s,h,f]
    kv = torch::einsum("nshd,nshf->nhdf", {values, phi_k});
    normalizer = phi_k.sum(1);
  } else {
    auto* cross = std::get_if<CrossLinearState>(&state);
    TORCH_CHECK(cross != nullptr,
                "RecurrentCrossLinearAttention got a state of another attention type");
    kv = cross->kv;
    normalizer = cross->normalizer;
  }
  TORCH_CHECK(kv.size(0) == n, "The batch size changed during iteration (state ", kv.size(0),
              ", input ", n, ")");
  torch::Tensor inv_denominator = 1.0 / ((phi_q * normalizer).sum(-1) + eps_);  // (N,H)
  // (N,H,D,F) x (N,H,F,1) -> (N,H,D)
  torch::Tensor out = torch::matmul(kv, phi_q.unsqueeze(-1)).squeeze(-1);
  out = out * inv_denominator.unsqueeze(-1);
  if (new_sequence) state = CrossLinearState{kv, normalizer};
  return out;
}

std::optional<ParamValue> RecurrentCrossLinearAttentionImpl::attribute(
    const std::string& name) const {
  return LinearAttentionAttribute(name, query_dimensions_, eps_, event_dispatcher_);
}

absl::Status RegisterRecurrentLinearAttention(RecurrentAttentionRegistry& registry) {
  auto create = [](const std::vector<RecurrentAttentionPtr>&,
                   const ParamMap& p) -> absl::StatusOr<RecurrentAttentionPtr> {
    return std::make_shared<RecurrentLinearAttentionImpl>(
        p.at("query_dimensions").as_int(), OptionalFactory(p.at("feature_map")), 1e-6,
        p.at("event_dispatcher").as_string());
  };
  for (const char* name : {"linear", "causal-linear"}) {
    absl::Status status =
        registry.Register(name, "RecurrentLinearAttention", LinearAttentionSpecs(), create,
                          LinearAttentionConstructorArgs());
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status RegisterRecurrentCrossLinearAttention(RecurrentCrossAttentionRegistry& registry) {
  return registry.Register(
      "linear", "RecurrentCrossLinearAttention", LinearAttentionSpecs(),
      [](const std::vector<RecurrentCrossAttentionPtr>&,
         const ParamMap& p) -> absl::StatusOr<RecurrentCrossAttentionPtr> {
        return std::make_shared<RecurrentCrossLinearAttentionImpl>(
            p.at("query_dimensions").as_int(), OptionalFactory(p.at("feature_map")), 1e-6,
            p.at("event_dispatcher").as_string());
      },
      LinearAttentionConstructorArgs());
}

}  // namespace performer
