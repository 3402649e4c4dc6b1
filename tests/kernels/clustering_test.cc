#include "kernels/clustering.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <utility>
#include <vector>

namespace performer::kernels {
namespace {

torch::Tensor Int64s(std::vector<int64_t> values) { return torch::tensor(values, torch::kInt64); }

// (..., ) int64 codes -> (..., bits) 0/1 int64.
torch::Tensor BitsOf(const torch::Tensor& codes, int64_t bits) {
  return codes.unsqueeze(-1).bitwise_right_shift(torch::arange(bits, torch::kInt64)).bitwise_and(1);
}

// Plain LibTorch reference of Hamming k-means for one (n, h) sequence of
// valid codes (L',), or nullopt when some cluster became empty (its
// replacement is random and cannot be replayed).
std::optional<std::pair<torch::Tensor, torch::Tensor>> ReferenceCluster(
    const torch::Tensor& codes, const torch::Tensor& initial, int64_t iterations, int64_t bits) {
  const int64_t clusters = initial.size(0);
  torch::Tensor code_bits = BitsOf(codes, bits);  // (L', bits)
  torch::Tensor centroid_bits = BitsOf(initial, bits);
  auto assign = [&] {
    torch::Tensor distance =
        code_bits.unsqueeze(1).ne(centroid_bits.unsqueeze(0)).sum(-1);  // (L', C)
    return distance.argmin(-1);  // first minimum: ties go to the lowest index
  };
  for (int64_t i = 1; i < iterations; ++i) {
    torch::Tensor one_hot = torch::one_hot(assign(), clusters).to(torch::kInt64);  // (L', C)
    if (one_hot.sum(0).eq(0).any().item<bool>()) return std::nullopt;
    torch::Tensor balance = torch::matmul(one_hot.t(), 2 * code_bits - 1);  // (C, bits)
    centroid_bits = balance.gt(0).to(torch::kInt64);
  }
  torch::Tensor groups = assign();
  torch::Tensor counts = torch::bincount(groups, {}, clusters);
  return std::make_pair(groups, counts);
}

TEST(ClusterHashesTest, MatchesReferenceWhenNoClusterEmpties) {
  int compared = 0;
  for (int seed = 0; seed < 20; ++seed) {
    torch::manual_seed(seed);
    const int64_t bits = 12, length = 40, clusters = 3, iterations = 5;
    torch::Tensor hashes = torch::randint(1 << bits, {2, 2, length}, torch::kInt64);
    torch::Tensor lengths = Int64s({length, 31});
    torch::Tensor positions = torch::randperm(length, torch::kInt64).narrow(0, 0, clusters);
    HashClusters result = ClusterHashes(hashes, lengths, positions, iterations, bits);
    for (int64_t n = 0; n < 2; ++n) {
      const int64_t valid = lengths[n].item<int64_t>();
      for (int64_t h = 0; h < 2; ++h) {
        torch::Tensor codes = hashes[n][h];
        auto expected = ReferenceCluster(codes.narrow(0, 0, valid),
                                         codes.index_select(0, positions), iterations, bits);
        if (!expected) continue;
        ++compared;
        EXPECT_TRUE(torch::equal(result.groups[n][h].narrow(0, 0, valid), expected->first));
        EXPECT_TRUE(torch::equal(result.counts[n][h], expected->second));
      }
    }
  }
  EXPECT_GE(compared, 40);
}

TEST(ClusterHashesTest, SeparatedCodesAreRecovered) {
  // Three well separated code families; one initial centroid in each.
  const int64_t bits = 30;
  torch::Tensor base = Int64s({0, int64_t{(1 << 10) - 1} << 10, int64_t{(1 << 10) - 1} << 20});
  torch::Tensor family = torch::arange(24, torch::kInt64).remainder(3);
  torch::Tensor noise = Int64s({int64_t{1} << 3})
                            .bitwise_left_shift(family * 10)
                            .mul(torch::arange(24, torch::kInt64).remainder(2));
  torch::Tensor codes = base.index_select(0, family).bitwise_xor(noise);
  torch::Tensor hashes = codes.view({1, 1, 24});
  HashClusters result = ClusterHashes(hashes, Int64s({24}), Int64s({0, 1, 2}), 10, bits);
  EXPECT_TRUE(torch::equal(result.groups.view({24}), family));
  EXPECT_TRUE(torch::equal(result.counts.view({3}), torch::full({3}, 8, torch::kInt64)));
}

TEST(ClusterHashesTest, PaddedCodesGetTheInvalidIdAndAreNotCounted) {
  torch::manual_seed(3);
  torch::Tensor hashes = torch::randint(1 << 8, {3, 2, 10}, torch::kInt64);
  torch::Tensor lengths = Int64s({10, 4, 0});
  HashClusters result = ClusterHashes(hashes, lengths.to(torch::kInt32), Int64s({9, 2}), 4, 8);
  EXPECT_TRUE(torch::equal(result.counts.sum(-1), lengths.view({3, 1}).expand({3, 2})));
  for (int64_t n = 0; n < 3; ++n) {
    const int64_t valid = lengths[n].item<int64_t>();
    torch::Tensor padded = result.groups[n].narrow(1, valid, 10 - valid);
    EXPECT_TRUE(padded.eq(3).all().item<bool>());  // C + 1
    EXPECT_TRUE(result.groups[n].narrow(1, 0, valid).lt(2).all().item<bool>());
  }
}

TEST(ClusterHashesTest, OneIterationAssignsToInitialCentroidsWithTiesToLowestIndex) {
  // Centroids 0b0000 and 0b1111; 0b0011 is equidistant and goes to cluster 0.
  torch::Tensor hashes = Int64s({0, 15, 3, 7, 1}).view({1, 1, 5});
  HashClusters result = ClusterHashes(hashes, Int64s({5}), Int64s({0, 1}), 1, 4);
  EXPECT_TRUE(torch::equal(result.groups.view({5}), Int64s({0, 1, 0, 1, 0})));
  // Identical initial centroids: everything goes to the lower index.
  HashClusters same = ClusterHashes(hashes, Int64s({5}), Int64s({1, 1}), 1, 4);
  EXPECT_TRUE(same.groups.eq(0).all().item<bool>());
}

TEST(ClusterHashesTest, EmptyClustersAreReseededReproduciblyAndThreadIndependently) {
  // Many copies of one code and a few far codes; both initial centroids sit
  // on the common code, so cluster 1 empties and gets a random centroid that
  // may capture the far codes.
  torch::Tensor row = torch::zeros({16}, torch::kInt64);
  row.narrow(0, 12, 4).fill_((int64_t{1} << 20) - 1);
  torch::Tensor hashes = row.view({1, 1, 16}).repeat({4, 3, 1}).contiguous();
  torch::Tensor lengths = torch::full({4}, 16, torch::kInt64);
  torch::Tensor positions = Int64s({0, 1});
  auto run = [&](uint64_t seed, int threads) {
    const int previous = at::get_num_threads();
    at::set_num_threads(threads);
    at::Generator generator = at::detail::createCPUGenerator(seed);
    HashClusters result = ClusterHashes(hashes, lengths, positions, 6, 20, generator);
    at::set_num_threads(previous);
    return result;
  };
  HashClusters a = run(7, 1);
  HashClusters b = run(7, 2);
  EXPECT_TRUE(torch::equal(a.groups, b.groups));
  EXPECT_TRUE(torch::equal(a.counts, b.counts));
  EXPECT_TRUE(torch::equal(a.counts.sum(-1), torch::full({4, 3}, 16, torch::kInt64)));
  // The random centroids differ across (n, h) and seeds, so over 12
  // sequences and a few seeds the far codes end up in both clusters.
  bool far_codes_split = false;
  for (uint64_t seed = 0; seed < 5 && !far_codes_split; ++seed) {
    far_codes_split = run(seed, 2).counts.select(2, 1).gt(0).any().item<bool>();
  }
  EXPECT_TRUE(far_codes_split);
  // The default generator follows torch::manual_seed.
  torch::manual_seed(11);
  HashClusters c = ClusterHashes(hashes, lengths, positions, 6, 20);
  torch::manual_seed(11);
  HashClusters d = ClusterHashes(hashes, lengths, positions, 6, 20);
  EXPECT_TRUE(torch::equal(c.groups, d.groups));
}

TEST(ClusterHashesTest, RejectsBadArguments) {
  torch::Tensor hashes = torch::zeros({1, 1, 4}, torch::kInt64);
  torch::Tensor lengths = Int64s({4});
  torch::Tensor positions = Int64s({0});
  EXPECT_THROW(ClusterHashes(hashes, lengths, positions, 2, 64), c10::Error);
  EXPECT_THROW(ClusterHashes(hashes, lengths, positions, 2, 0), c10::Error);
  EXPECT_THROW(ClusterHashes(hashes, lengths, Int64s({4}), 2, 8), c10::Error);
  EXPECT_THROW(ClusterHashes(hashes, Int64s({5}), positions, 2, 8), c10::Error);
  EXPECT_THROW(ClusterHashes(hashes.to(torch::kFloat), lengths, positions, 2, 8), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
