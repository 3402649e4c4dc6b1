#include "core/attention/improved_clustered_causal_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "core/attention/query_clustering.h"
#include "kernels/sparse_product.h"

namespace performer {

ImprovedClusteredCausalAttentionImpl::ImprovedClusteredCausalAttentionImpl(
    ImprovedClusteredAttentionOptions options)
    : options_(std::move(options)) {
  CheckImprovedClusteredOptions("ImprovedClusteredCausalAttention", options_);
  dropout_ = register_module("dropout", torch::nn::Dropout(options_.attention_dropout));
}

torch::Tensor ImprovedClusteredCausalAttentionImpl::forward(
    const torch::Tensor& queries, const torch::Tensor& keys, const torch::Tensor& values,
    const Mask& attn_mask, const Mask& query_lengths, const Mask& key_lengths) {
  constexpr const char* kName = "ImprovedClusteredCausalAttention";
  TORCH_CHECK(attn_mask.lower_triangular(), kName, " only supports lower triangular masks");
  CheckClusteredAttentionInputs(kName, queries, keys, values, key_lengths, options_.clusters);
  const int64_t batch = queries.size(0);
  const int64_t heads = queries.size(2);
  const int64_t length = queries.size(1);
  const int64_t keys_length = keys.size(1);
  TORCH_CHECK(attn_mask.shape() == std::vector<int64_t>({length, keys_length}), kName,
              ": attn_mask must be L x S = ", length, " x ", keys_length);
  torch::Tensor lengths = QueryLengthsOf(kName, query_lengths, batch, length);
  absl::StatusOr<torch::Tensor> key_lens = key_lengths.lengths();
  TORCH_CHECK(key_lens.ok(), kName, ": key_lengths must be a length mask");
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
  // Every selected key must be a valid key of every sample.
  const int64_t shortest = batch > 0 ? key_lens->min().item<int64_t>() : keys_length;
  const int64_t top = std::max<int64_t>(0, std::min(options_.topk, shortest));
  torch::Tensor topk = std::get<1>(scores.detach().topk(top, -1, /*largest=*/true,
                                                        /*sorted=*/false));  // (N,H,C,k')

  torch::Tensor top_scores = kernels::ClusteredSparseDotProduct(q, k, topk, clusters.groups);
  torch::Tensor own_cluster =
      clusters.groups.clamp_max(n_clusters - 1).unsqueeze(-1).expand({batch, heads, length, top});
  torch::Tensor key_index = topk.gather(2, own_cluster);  // (N,H,L,k')
  torch::Tensor position = torch::arange(length, topk.options()).view({1, 1, length, 1});
  torch::Tensor future = key_index.gt(position);
  top_scores = top_scores.masked_fill(future, -1e7);
  torch::Tensor attention = torch::softmax(temperature * top_scores, -1).masked_fill(future, 0.0);
  torch::Tensor out =
      kernels::ClusteredSparseWeightedAverage(dropout_(attention), v, topk, clusters.groups);
  return out.permute({0, 2, 1, 3}).contiguous();
}

std::optional<ParamValue> ImprovedClusteredCausalAttentionImpl::attribute(
    const std::string& name) const {
  return ImprovedClusteredAttribute(options_, dropout_, name);
}

absl::Status RegisterImprovedClusteredCausalAttention(AttentionRegistry& registry) {
  return registry.Register(
      "causal-improved-clustered", "ImprovedClusteredCausalAttention",
      ImprovedClusteredParameterSpecs(),
      [](const std::vector<AttentionPtr>&, const ParamMap& params) -> absl::StatusOr<AttentionPtr> {
        try {
          return std::make_shared<ImprovedClusteredCausalAttentionImpl>(
              ImprovedClusteredOptionsFromParams(params));
        } catch (const c10::Error& e) {
          return absl::InvalidArgumentError(e.what_without_backtrace());
        }
      });
}

}  // namespace performer
