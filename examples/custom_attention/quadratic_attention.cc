#include "examples/custom_attention/quadratic_attention.h"

#include <torch/torch.h>

#include "core/recurrent/key_value_slots.h"
#include "core/registry/param_spec.h"

namespace performer::examples {
namespace {

// weights [.., l, s] from scores q . k and a visibility (0/1 or bool) mask:
// (t * scores)^2 * visible, normalised over s.
torch::Tensor QuadraticWeights(const torch::Tensor& scores, const torch::Tensor& visible,
                               double temp, double eps) {
  torch::Tensor w = (scores * temp).square() * visible.to(scores.scalar_type());
  return w / (w.sum(-1, /*keepdim=*/true) + eps);
}

std::optional<ParamValue> QuadraticAttribute(const std::string& name, double temp, double eps) {
  if (name == "quadratic_temp") return ParamValue(temp);
  if (name == "eps") return ParamValue(eps);
  return std::nullopt;
}

std::vector<std::pair<std::string, ParamSpecPtr>> QuadraticSpecs() {
  return {{"quadratic_temp", OptionalSpec(FloatSpec(), 1.0)},
          {"eps", OptionalSpec(FloatSpec(), 1e-6)}};
}

}  // namespace

torch::Tensor QuadraticAttentionImpl::forward(const torch::Tensor& queries,
                                              const torch::Tensor& keys,
                                              const torch::Tensor& values, const Mask& attn_mask,
                                              const Mask& /*query_lengths*/,
                                              const Mask& key_lengths) {
  torch::Tensor scores = torch::einsum("nlhe,nshe->nhls", {queries, keys});
  torch::Tensor visible = attn_mask.float_matrix().to(scores.device()).unsqueeze(0).unsqueeze(0) *
                          key_lengths.float_matrix().to(scores.device()).unsqueeze(1).unsqueeze(1);
  torch::Tensor weights = QuadraticWeights(scores, visible, quadratic_temp_, eps_);
  return torch::einsum("nhls,nshd->nlhd", {weights, values}).contiguous();
}

std::optional<ParamValue> QuadraticAttentionImpl::attribute(const std::string& name) const {
  return QuadraticAttribute(name, quadratic_temp_, eps_);
}

torch::Tensor RecurrentQuadraticAttentionImpl::forward(const torch::Tensor& query,
                                                       const torch::Tensor& key,
                                                       const torch::Tensor& value,
                                                       AttentionState& state) {
  torch::Tensor keys = key.unsqueeze(2);  // (N, H, t, E)
  torch::Tensor values = value.unsqueeze(2);
  if (!IsNewSequence(state)) {
    auto* full = std::get_if<RecurrentFullState>(&state);
    TORCH_CHECK(full != nullptr, "RecurrentQuadraticAttention got a state of another attention");
    keys = torch::cat({full->keys, keys}, 2);
    values = torch::cat({full->values, values}, 2);
  }
  torch::Tensor scores = torch::matmul(keys, query.unsqueeze(-1)).squeeze(-1);  // (N, H, t)
  torch::Tensor weights = QuadraticWeights(scores, torch::ones_like(scores), quadratic_temp_, eps_);
  state = RecurrentFullState{keys, values};
  return torch::matmul(weights.unsqueeze(-2), values).squeeze(-2);
}

std::vector<SlotTensorSpec> RecurrentQuadraticAttentionImpl::SlotStateSpec(
    const SlotShape& shape) const {
  return KeyValueSlotSpec(shape);
}

torch::Tensor RecurrentQuadraticAttentionImpl::ForwardSlots(const torch::Tensor& queries,
                                                            const torch::Tensor& keys,
                                                            const torch::Tensor& values,
                                                            SlotRows& rows) {
  KeyValueWindow window = AppendKeyValues(keys, values, rows);
  torch::Tensor scores = torch::einsum("nlhe,nthe->nhlt", {queries, window.keys});
  torch::Tensor weights = QuadraticWeights(scores, window.Visible(), quadratic_temp_, eps_);
  return torch::einsum("nhlt,nthd->nlhd", {weights, window.values});
}

std::optional<ParamValue> RecurrentQuadraticAttentionImpl::attribute(
    const std::string& name) const {
  return QuadraticAttribute(name, quadratic_temp_, eps_);
}

absl::Status RegisterQuadraticAttention(AttentionRegistry& registry) {
  return registry.Register(
      "square", "QuadraticAttention", QuadraticSpecs(),
      [](const std::vector<AttentionPtr>&, const ParamMap& p) -> absl::StatusOr<AttentionPtr> {
        return std::make_shared<QuadraticAttentionImpl>(p.at("quadratic_temp").as_float(),
                                                        p.at("eps").as_float());
      });
}

absl::Status RegisterRecurrentQuadraticAttention(RecurrentAttentionRegistry& registry) {
  return registry.Register("square", "RecurrentQuadraticAttention", QuadraticSpecs(),
                           [](const std::vector<RecurrentAttentionPtr>&,
                              const ParamMap& p) -> absl::StatusOr<RecurrentAttentionPtr> {
                             return std::make_shared<RecurrentQuadraticAttentionImpl>(
                                 p.at("quadratic_temp").as_float(), p.at("eps").as_float());
                           });
}

absl::Status RegisterQuadraticAttentionGlobally() {
  if (!GlobalAttentionRegistry().Contains("square")) {
    if (absl::Status s = RegisterQuadraticAttention(GlobalAttentionRegistry()); !s.ok()) return s;
  }
  if (!GlobalRecurrentAttentionRegistry().Contains("square")) {
    return RegisterRecurrentQuadraticAttention(GlobalRecurrentAttentionRegistry());
  }
  return absl::OkStatus();
}

}  // namespace performer::examples
