#include "core/attention/aft_full_attention.h"

#include <torch/torch.h>

#include "core/attention/attention_parameters.h"

namespace performer {

using torch::indexing::None;
using torch::indexing::Slice;

AFTFullAttentionImpl::AFTFullAttentionImpl(int64_t max_sequence_length,
                                           int64_t aft_parameterization,
                                           std::string event_dispatcher)
    : event_dispatcher_(std::move(event_dispatcher)) {
  u_ = register_parameter("u", torch::randn({max_sequence_length, aft_parameterization}) * 0.01);
  v_ = register_parameter("v", torch::randn({max_sequence_length, aft_parameterization}) * 0.01);
}

torch::Tensor AFTFullAttentionImpl::forward(const torch::Tensor& queries, const torch::Tensor& keys,
                                            const torch::Tensor& values, const Mask& attn_mask,
                                            const Mask& /*query_lengths*/,
                                            const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
              "AFTFullAttention expects queries (N,L,H,E), keys (N,S,H,E) and values (N,S,H,D)");
  const int64_t query_length = queries.size(1);
  const int64_t key_length = values.size(1);
  TORCH_CHECK(queries.size(3) == values.size(3),
              "AFT requires that queries, keys and values have the same dimensionality");
  TORCH_CHECK(query_length <= u_.size(0) && key_length <= v_.size(0),
              "AFTFullAttention was built for sequences of at most ", u_.size(0),
              " positions, got L=", query_length, " and S=", key_length);
  const torch::Device device = queries.device();
  torch::Tensor gate = torch::sigmoid(queries);
  // (N,S,H,E) -> (N,H,E,S)
  torch::Tensor k = keys.permute({0, 2, 3, 1}).contiguous();
  torch::Tensor v = values.permute({0, 2, 3, 1}).contiguous();
  k = k + key_lengths.additive_matrix().to(device).index({Slice(), None, None, Slice()});
  torch::Tensor w = u_.slice(0, 0, query_length).mm(v_.slice(0, 0, key_length).t()) +
                    attn_mask.additive_matrix().to(device);
  // (N,1,H,E,S) * (1,L,1,1,S) -> (N,L,H,E,S)
  torch::Tensor z = k.index({Slice(), None}) * w.index({None, Slice(), None, None, Slice()});
  torch::Tensor weights = torch::softmax(z, -1);
  return gate * torch::einsum("nlhds,nhds->nlhd", {weights, v});
}

std::optional<ParamValue> AFTFullAttentionImpl::attribute(const std::string& name) const {
  if (name == "max_sequence_length") return ParamValue(u_.size(0));
  if (name == "aft_parameterization") return ParamValue(u_.size(1));
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return std::nullopt;
}

absl::Status RegisterAFTFullAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register("aft-full", "AFTFullAttention",
                           {{"max_sequence_length", ap::MaxSequenceLength()},
                            {"aft_parameterization", ap::AftParameterization()},
                            {"event_dispatcher", ap::EventDispatcher()}},
                           [](const std::vector<AttentionPtr>& /*positional*/,
                              const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
                             return ap::Construct<AttentionImpl>([&] {
                               return std::make_shared<AFTFullAttentionImpl>(
                                   ap::Int(params, "max_sequence_length"),
                                   ap::Int(params, "aft_parameterization"),
                                   ap::String(params, "event_dispatcher"));
                             });
                           });
}

}  // namespace performer
