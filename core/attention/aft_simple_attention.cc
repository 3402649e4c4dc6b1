#include "core/attention/aft_simple_attention.h"

#include <torch/torch.h>

#include "core/attention/attention_parameters.h"

namespace performer {

using torch::indexing::None;
using torch::indexing::Slice;

AFTSimpleAttentionImpl::AFTSimpleAttentionImpl(std::string event_dispatcher)
    : event_dispatcher_(std::move(event_dispatcher)) {}

torch::Tensor AFTSimpleAttentionImpl::forward(const torch::Tensor& queries,
                                              const torch::Tensor& keys,
                                              const torch::Tensor& values, const Mask& attn_mask,
                                              const Mask& /*query_lengths*/,
                                              const Mask& key_lengths) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4,
              "AFTSimpleAttention expects queries (N,L,H,E), keys (N,S,H,E) and values (N,S,H,D)");
  TORCH_CHECK(queries.size(3) == values.size(3),
              "AFT requires that queries, keys and values have the same dimensionality");
  torch::Tensor gate = torch::sigmoid(queries);
  torch::Tensor k =
      keys + key_lengths.additive_matrix().to(keys.device()).index({Slice(), Slice(), None, None});
  if (attn_mask.lower_triangular()) {
    // The reference's prefix-normalised weights, kept as they are.
    torch::Tensor key_max = std::get<0>(k.max(/*dim=*/1, /*keepdim=*/true));
    torch::Tensor k_exp = torch::exp(k - key_max);
    torch::Tensor weights = k_exp / k_exp.cumsum(1);
    return gate * (weights * values).cumsum(1);
  }
  TORCH_CHECK(attn_mask.all_ones(),
              "You cannot use general attention masks with AFTSimpleAttention because it would "
              "be quadratic in time. Use AFTFullAttention instead.");
  torch::Tensor weights = torch::softmax(k, 1);
  return gate * (weights * values).sum(1, /*keepdim=*/true);
}

std::optional<ParamValue> AFTSimpleAttentionImpl::attribute(const std::string& name) const {
  if (name == "event_dispatcher") return ParamValue(event_dispatcher_);
  return std::nullopt;
}

absl::Status RegisterAFTSimpleAttention(AttentionRegistry& registry) {
  namespace ap = attention_parameters;
  return registry.Register(
      "aft-simple", "AFTSimpleAttention", {{"event_dispatcher", ap::EventDispatcher()}},
      [](const std::vector<AttentionPtr>& /*positional*/,
         const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
        return ap::Construct<AttentionImpl>([&] {
          return std::make_shared<AFTSimpleAttentionImpl>(ap::String(params, "event_dispatcher"));
        });
      });
}

}  // namespace performer
