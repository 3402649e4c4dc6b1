#include "core/attention/query_clustering.h"

#include <torch/torch.h>

#include <vector>

#include "kernels/aggregate.h"
#include "kernels/clustering.h"
#include "kernels/hashing.h"

namespace performer {

QueryClusters ClusterQueries(const torch::Tensor& queries, const torch::Tensor& lengths,
                             const QueryClusteringOptions& options) {
  const int64_t length = queries.size(2);
  const int64_t dims = queries.size(3);
  torch::Tensor q = queries.detach();
  // Every draw comes from the CPU generator, whatever the device of the
  // queries, so that one seed gives the same clusters on the CPU and on CUDA.
  torch::Tensor planes =
      torch::randn({options.bits, dims + 1}, torch::TensorOptions().dtype(q.scalar_type()));
  if (!options.hash_bias) planes.select(1, dims).zero_();
  torch::Tensor hashes = kernels::ComputeHashes(q, planes.to(q.device()));
  torch::Tensor positions = torch::randperm(length, torch::TensorOptions().dtype(torch::kInt64))
                                .narrow(0, 0, options.clusters)
                                .to(q.device());
  kernels::HashClusters result = kernels::ClusterHashes(hashes, lengths.to(q.device()), positions,
                                                        options.iterations, options.bits);
  return {options.clusters, result.groups, result.counts, lengths};
}

torch::Tensor ClusterCentroids(const torch::Tensor& queries, const QueryClusters& clusters) {
  // Empty clusters get a factor of 1 (their centroid is 0 and never used).
  torch::Tensor factors = 1.0 / clusters.counts.clamp_min(1).to(queries.scalar_type());
  return kernels::Aggregate(queries, clusters.groups, factors);
}

torch::Tensor BroadcastToQueries(const torch::Tensor& per_cluster, const QueryClusters& clusters) {
  torch::Tensor ones = torch::ones(clusters.counts.sizes(), per_cluster.options());
  return kernels::Broadcast(per_cluster, clusters.groups, ones);
}

void CheckClusteredAttentionInputs(const char* attention, const torch::Tensor& queries,
                                   const torch::Tensor& keys, const torch::Tensor& values,
                                   const Mask& key_lengths, int64_t clusters) {
  TORCH_CHECK(queries.dim() == 4 && keys.dim() == 4 && values.dim() == 4, attention,
              ": queries, keys and values must be 4-D (N, L, H, E) / (N, S, H, E) / (N, S, H, D)");
  const int64_t batch = queries.size(0);
  const int64_t length = queries.size(1);
  const int64_t heads = queries.size(2);
  const int64_t keys_length = keys.size(1);
  TORCH_CHECK(keys.size(0) == batch && values.size(0) == batch, attention,
              ": queries, keys and values must have the same batch size");
  TORCH_CHECK(keys.size(2) == heads && values.size(2) == heads, attention,
              ": queries, keys and values must have the same number of heads");
  TORCH_CHECK(keys.size(3) == queries.size(3), attention,
              ": queries and keys must have the same per-head size E, got ", queries.size(3),
              " and ", keys.size(3));
  TORCH_CHECK(values.size(1) == keys_length, attention, ": keys and values must have the same ",
              "length S, got ", keys_length, " and ", values.size(1));
  TORCH_CHECK(key_lengths.shape() == std::vector<int64_t>({batch, keys_length}), attention,
              ": key_lengths must be an N x S = ", batch, " x ", keys_length, " mask");
  TORCH_CHECK(clusters <= length, attention, ": cannot form ", clusters,
              " clusters from L = ", length, " queries (clusters must not exceed L)");
}

torch::Tensor QueryLengthsOf(const char* attention, const Mask& query_lengths, int64_t batch,
                             int64_t length) {
  TORCH_CHECK(query_lengths.shape() == std::vector<int64_t>({batch, length}), attention,
              ": query_lengths must be an N x L = ", batch, " x ", length, " length mask");
  absl::StatusOr<torch::Tensor> lengths = query_lengths.lengths();
  TORCH_CHECK(lengths.ok(), attention,
              ": query_lengths must be a length mask (each row a run of kept positions)");
  return lengths->to(torch::kCPU, torch::kInt64);
}

}  // namespace performer
