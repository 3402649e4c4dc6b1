// Query clustering shared by the clustered attentions (clustered,
// improved-clustered, causal-improved-clustered): steps (1)-(3) of
// fast-transformers' algorithm and the bridges between queries and clusters.
//
//   ClusterQueries(Q (N,H,L,E), lengths (N,), options)
//     (1) hyperplanes P ~ N(0, 1) of shape (bits, E+1) are drawn on every call
//         from torch's default generator (the last column zeroed when
//         hash_bias is false); bit b of a query's code is [q . P[b,:E] > P[b,E]];
//     (2) per (n, h) the codes of the first lengths[n] queries are clustered by
//         Hamming k-means (kernels/clustering.h). The initial centroids are the
//         codes at `clusters` distinct positions drawn uniformly from [0, L)
//         (the same for every (n, h); they may be padded positions). The
//         reference draws these positions with numpy; here they come from
//         torch::randperm on the default generator, so torch::manual_seed
//         makes a forward pass reproducible. Padded queries get group C + 1.
//         The planes and positions are drawn on the CPU whatever the device of
//         the queries, and the clustering draws its seeds there too, so a seed
//         gives the same groups on the CPU and on CUDA.
//   ClusterCentroids: (3) the mean of each cluster's member queries
//         (N,H,C,E), differentiable with respect to the queries.
//   BroadcastToQueries: per-cluster rows (N,H,C,D) -> per-query rows
//         (N,H,L,D), exactly 0 for padded queries; differentiable.
//
// The reference sorts queries by cluster before its CUDA kernels; the CPU
// kernels here take unsorted groups, which changes memory order only.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "core/masks.h"

namespace performer {

struct QueryClusteringOptions {
  int64_t clusters = 1;
  int64_t iterations = 10;
  int64_t bits = 32;
  bool hash_bias = true;
};

struct QueryClusters {
  int64_t clusters = 0;   // C
  torch::Tensor groups;   // (N, H, L) int64; C + 1 for padded queries.
  torch::Tensor counts;   // (N, H, C) int64.
  torch::Tensor lengths;  // (N,) int64 query lengths.
};

QueryClusters ClusterQueries(const torch::Tensor& queries, const torch::Tensor& lengths,
                             const QueryClusteringOptions& options);

torch::Tensor ClusterCentroids(const torch::Tensor& queries, const QueryClusters& clusters);

torch::Tensor BroadcastToQueries(const torch::Tensor& per_cluster, const QueryClusters& clusters);

// Input checks shared by the clustered attentions; `attention` names the
// caller in messages. Queries (N,L,H,E), keys (N,S,H,E), values (N,S,H,D).
void CheckClusteredAttentionInputs(const char* attention, const torch::Tensor& queries,
                                   const torch::Tensor& keys, const torch::Tensor& values,
                                   const Mask& key_lengths, int64_t clusters);

// The (N,) int64 lengths of `query_lengths`, which must be an N x L length
// mask. (The reference requires a LengthMask object; any mask whose rows are
// runs of kept positions is accepted here, as its lengths are well defined.)
torch::Tensor QueryLengthsOf(const char* attention, const Mask& query_lengths, int64_t batch,
                             int64_t length);

}  // namespace performer
