#include "kernels/cpu/clustering_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace performer::kernels::cpu {
namespace {

int HammingDistance(int64_t a, int64_t b) {
  return __builtin_popcountll(static_cast<uint64_t>(a ^ b));
}

// Assigns codes[0, length) to their nearest centroid (ties: lowest index).
void Assign(const int64_t* codes, int64_t length, const std::vector<int64_t>& centroids,
            int64_t* groups) {
  const int64_t clusters = static_cast<int64_t>(centroids.size());
  for (int64_t l = 0; l < length; ++l) {
    int best_distance = 65;
    int64_t best = 0;
    for (int64_t c = 0; c < clusters; ++c) {
      const int d = HammingDistance(codes[l], centroids[c]);
      if (d < best_distance) {
        best_distance = d;
        best = c;
      }
    }
    groups[l] = best;
  }
}

}  // namespace

HashClusters ClusterHashesCpu(const torch::Tensor& hashes, const torch::Tensor& lengths,
                              const torch::Tensor& centroid_positions, int64_t iterations,
                              int64_t bits, const torch::Tensor& seeds) {
  const int64_t batch = hashes.size(0);
  const int64_t heads = hashes.size(1);
  const int64_t length = hashes.size(2);
  const int64_t clusters = centroid_positions.size(0);
  const int64_t invalid = clusters + 1;
  const uint64_t value_mask = (uint64_t{1} << bits) - 1;

  torch::Tensor groups = torch::empty({batch, heads, length}, hashes.options());
  torch::Tensor counts = torch::zeros({batch, heads, clusters}, hashes.options());
  const int64_t* codes_all = hashes.data_ptr<int64_t>();
  const int64_t* lengths_a = lengths.data_ptr<int64_t>();
  const int64_t* positions = centroid_positions.data_ptr<int64_t>();
  const int64_t* seeds_a = seeds.data_ptr<int64_t>();
  int64_t* groups_all = groups.data_ptr<int64_t>();
  int64_t* counts_all = counts.data_ptr<int64_t>();

  // One (n, h) sequence per task: each is an independent k-means run.
  at::parallel_for(0, batch * heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> centroids(clusters);
    std::vector<int64_t> members(clusters);
    // balance[c * bits + b] = (#members with bit b set) - (#members without).
    std::vector<int64_t> balance(clusters * bits);
    for (int64_t nh = begin; nh < end; ++nh) {
      const int64_t valid = lengths_a[nh / heads];
      const int64_t* codes = codes_all + nh * length;
      int64_t* group = groups_all + nh * length;
      std::mt19937_64 rng(static_cast<uint64_t>(seeds_a[nh]));
      for (int64_t c = 0; c < clusters; ++c) centroids[c] = codes[positions[c]];

      for (int64_t iteration = 1; iteration < iterations; ++iteration) {
        Assign(codes, valid, centroids, group);
        std::fill(members.begin(), members.end(), 0);
        std::fill(balance.begin(), balance.end(), 0);
        for (int64_t l = 0; l < valid; ++l) {
          const int64_t c = group[l];
          ++members[c];
          int64_t* bal = balance.data() + c * bits;
          for (int64_t b = 0; b < bits; ++b) bal[b] += ((codes[l] >> b) & 1) ? 1 : -1;
        }
        for (int64_t c = 0; c < clusters; ++c) {
          if (members[c] == 0) {
            centroids[c] = static_cast<int64_t>(rng() & value_mask);
            continue;
          }
          const int64_t* bal = balance.data() + c * bits;
          int64_t centroid = 0;
          for (int64_t b = 0; b < bits; ++b) centroid |= static_cast<int64_t>(bal[b] > 0) << b;
          centroids[c] = centroid;
        }
      }
      Assign(codes, valid, centroids, group);
      int64_t* count = counts_all + nh * clusters;
      for (int64_t l = 0; l < valid; ++l) ++count[group[l]];
      for (int64_t l = valid; l < length; ++l) group[l] = invalid;
    }
  });
  return {groups, counts};
}

}  // namespace performer::kernels::cpu
