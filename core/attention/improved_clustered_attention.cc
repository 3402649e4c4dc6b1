#include "core/attention/improved_clustered_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <utility>

#include "core/attention/query_clustering.h"
#include "core/registry/param_spec.h"
#include "kernels/sparse_product.h"

namespace performer {

void CheckImprovedClusteredOptions(const char* attention,
                                   const ImprovedClusteredAttentionOptions& options) {
  TORCH_CHECK(options.clusters >= 1, attention, ": clusters must be >= 1, got ", options.clusters);
  TORCH_CHECK(options.iterations >= 0, attention, ": iterations must be >= 0, got ",
              options.iterations);
  TORCH_CHECK(options.bits >= 1 && options.bits <= 63, attention, ": bits must be in [1, 63], got ",
              options.bits);
  TORCH_CHECK(options.topk >= 0, attention, ": topk must be >= 0, got ", options.topk);
}

ImprovedClusteredAttentionImpl::ImprovedClusteredAttentionImpl(
    ImprovedClusteredAttentionOptions options)
    : options_(std::move(options)) {
  CheckImprovedClusteredOptions("ImprovedClusteredAttention", options_);
  dropout_ = register_module("dropout", torch::nn::Dropout(options_.attention_dropout));
}

torch::Tensor ImprovedClusteredAttentionImpl::forward(
    const torch::Tensor& queries, const torch::Tensor& keys, const torch::Tensor& values,
    const Mask& attn_mask, const Mask& query_lengths, const Mask& key_lengths) {
  constexpr const char* kName = "ImprovedClusteredAttention";
  TORCH_CHECK(attn_mask.all_ones(), kName,
              " cannot use an arbitrary attention mask (attn_mask must be all ones)");
  CheckClusteredAttentionInputs(kName, queries, keys, values, key_lengths, options_.clusters);
  const int64_t batch = queries.size(0);
  const int64_t heads = queries.size(2);
  const int64_t length = queries.size(1);
  const int64_t keys_length = keys.size(1);
  torch::Tensor lengths = QueryLengthsOf(kName, query_lengths, batch, length);
  const double temperature = SoftmaxTemperature(options_.softmax_temp, queries.size(3));

  torch::Tensor q = queries.permute({0, 2, 1, 3});  // (N, H, L, E)
  torch::Tensor k = keys.permute({0, 2, 1, 3});     // (N, H, S, E)
  torch::Tensor v = values.permute({0, 2, 1, 3});   // (N, H, S, D)
  QueryClusters clusters = ClusterQueries(
      q, lengths, {options_.clusters, options_.iterations, options_.bits, options_.hash_bias});
  const int64_t n_clusters = clusters.clusters;
  torch::Tensor centroids = ClusterCentroids(q, clusters);  // (N, H, C, E)

  torch::Tensor key_add = key_lengths.additive_matrix()
                              .to(q.device(), q.scalar_type())
                              .view({batch, 1, 1, keys_length});
  torch::Tensor scores = torch::matmul(centroids, k.transpose(-2, -1)) + key_add;  // (N,H,C,S)
  const int64_t top = std::min(options_.topk, keys_length);
  torch::Tensor topk = std::get<1>(scores.detach().topk(top, -1, /*largest=*/true,
                                                        /*sorted=*/false));  // (N,H,C,k')

  // Bottom part: the centroid attention outside each cluster's top-k keys.
  torch::Tensor attention = torch::softmax(temperature * scores, -1);
  torch::Tensor outside_topk = torch::ones_like(attention).scatter(-1, topk, 0.0);
  torch::Tensor bottom_attention = attention * outside_topk;
  torch::Tensor bottom_mass = bottom_attention.sum(-1, /*keepdim=*/true);  // (N,H,C,1)
  torch::Tensor bottom = BroadcastToQueries(torch::matmul(dropout_(bottom_attention), v), clusters);

  // Top part: exact scores of every query with its cluster's top-k keys. A
  // slot is masked when its own key is padding (see the header on P-IC3).
  torch::Tensor top_scores = kernels::ClusteredSparseDotProduct(q, k, topk, clusters.groups);
  torch::Tensor padded_key = key_lengths.bool_matrix().to(q.device()).logical_not();  // (N, S)
  torch::Tensor padded_at_topk = padded_key.view({batch, 1, 1, keys_length})
                                     .expand({batch, heads, n_clusters, keys_length})
                                     .gather(-1, topk);                      // (N,H,C,k')
  torch::Tensor valid_query = clusters.groups.lt(n_clusters).unsqueeze(-1);  // (N,H,L,1)
  torch::Tensor own_cluster =
      clusters.groups.clamp_max(n_clusters - 1).unsqueeze(-1).expand({batch, heads, length, top});
  torch::Tensor padded_slot = padded_at_topk.gather(2, own_cluster).logical_and(valid_query);
  top_scores = top_scores.masked_fill(padded_slot, -std::numeric_limits<double>::infinity());
  torch::Tensor top_weight = BroadcastToQueries(1.0 - bottom_mass, clusters);  // (N,H,L,1)
  torch::Tensor top_attention = torch::softmax(temperature * top_scores, -1) * top_weight;
  torch::Tensor top_values =
      kernels::ClusteredSparseWeightedAverage(dropout_(top_attention), v, topk, clusters.groups);
  return (top_values + bottom).permute({0, 2, 1, 3}).contiguous();
}

std::optional<ParamValue> ImprovedClusteredAttribute(const ImprovedClusteredAttentionOptions& o,
                                                     const torch::nn::Dropout& dropout,
                                                     const std::string& name) {
  if (name == "clusters") return ParamValue(o.clusters);
  if (name == "iterations") return ParamValue(o.iterations);
  if (name == "bits") return ParamValue(o.bits);
  if (name == "hash_bias") return ParamValue(o.hash_bias);
  if (name == "topk") return ParamValue(o.topk);
  if (name == "softmax_temp") return o.softmax_temp ? ParamValue(*o.softmax_temp) : ParamValue();
  if (name == "dropout.p") return ParamValue(dropout->options.p());
  if (name == "event_dispatcher") return ParamValue(o.event_dispatcher);
  return std::nullopt;
}

std::optional<ParamValue> ImprovedClusteredAttentionImpl::attribute(const std::string& name) const {
  return ImprovedClusteredAttribute(options_, dropout_, name);
}

std::vector<std::pair<std::string, ParamSpecPtr>> ImprovedClusteredParameterSpecs() {
  return {{"clusters", IntSpec()},
          {"iterations", OptionalSpec(IntSpec(), int64_t{10})},
          {"bits", OptionalSpec(IntSpec(), int64_t{63})},
          {"hash_bias", OptionalSpec(BoolSpec(), true)},
          {"topk", OptionalSpec(IntSpec(), int64_t{32})},
          {"softmax_temp", OptionalSpec(FloatSpec())},
          {"attention_dropout", OptionalSpec(FloatSpec(), 0.1)},
          {"event_dispatcher", OptionalSpec(EventDispatcherInstanceSpec(), "")}};
}

ImprovedClusteredAttentionOptions ImprovedClusteredOptionsFromParams(const ParamMap& params) {
  ImprovedClusteredAttentionOptions options;
  options.clusters = params.at("clusters").as_int();
  options.iterations = params.at("iterations").as_int();
  options.bits = params.at("bits").as_int();
  options.hash_bias = params.at("hash_bias").as_bool();
  options.topk = params.at("topk").as_int();
  const ParamValue& temp = params.at("softmax_temp");
  if (!temp.is_none()) options.softmax_temp = temp.as_float();
  options.attention_dropout = params.at("attention_dropout").as_float();
  options.event_dispatcher = params.at("event_dispatcher").as_string();
  return options;
}

absl::Status RegisterImprovedClusteredAttention(AttentionRegistry& registry) {
  return registry.Register(
      "improved-clustered", "ImprovedClusteredAttention", ImprovedClusteredParameterSpecs(),
      [](const std::vector<AttentionPtr>&, const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
        try {
          return std::make_shared<ImprovedClusteredAttentionImpl>(
              ImprovedClusteredOptionsFromParams(params));
        } catch (const c10::Error& e) {
          return absl::InvalidArgumentError(e.what_without_backtrace());
        }
      });
}

}  // namespace performer
