// CUDA hashing and Hamming k-means against the CPU kernels: integer outputs,
// compared exactly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "kernels/clustering.h"
#include "kernels/hashing.h"
#include "tests/testing/cuda_device.h"

namespace performer::kernels {
namespace {

TEST(HashingCudaTest, MatchesCpuBitForBit) {
  PERFORMER_REQUIRE_CUDA();
  torch::manual_seed(41);
  struct Case {
    std::vector<int64_t> shape;  // X shape, last = E
    int64_t bits;
  };
  for (const Case& c : std::vector<Case>{{{1, 1}, 1},
                                         {{7, 3}, 5},
                                         {{2, 4, 37, 64}, 63},
                                         {{3, 2, 100, 33}, 32},
                                         {{1000, 17}, 31},
                                         {{5, 600}, 40},  // planes past the shared-memory stage
                                         {{0, 8}, 4}}) {
    for (torch::ScalarType dtype : {torch::kFloat, torch::kDouble}) {
      SCOPED_TRACE("E " + std::to_string(c.shape.back()) + " bits " + std::to_string(c.bits) +
                   (dtype == torch::kFloat ? " float32" : " float64"));
      const torch::TensorOptions options = torch::TensorOptions().dtype(dtype);
      const torch::Tensor x = torch::randn(c.shape, options);
      torch::Tensor planes = torch::randn({c.bits, c.shape.back() + 1}, options);
      const torch::Tensor expected = ComputeHashes(x, planes);
      const torch::Tensor got = ComputeHashes(x.cuda(), planes.cuda()).cpu();
      ASSERT_EQ(got.sizes(), expected.sizes());
      EXPECT_TRUE(torch::equal(got, expected))
          << "rows differing: " << got.ne(expected).sum().item<int64_t>();
      // Zero offsets (cosine hashing) as well.
      planes.select(1, c.shape.back()).zero_();
      EXPECT_TRUE(
          torch::equal(ComputeHashes(x.cuda(), planes.cuda()).cpu(), ComputeHashes(x, planes)));
    }
  }
}

struct ClusterCase {
  int64_t n, h, l, clusters, iterations, bits;
};

std::string Name(const ::testing::TestParamInfo<ClusterCase>& info) {
  const ClusterCase& c = info.param;
  return "N" + std::to_string(c.n) + "H" + std::to_string(c.h) + "L" + std::to_string(c.l) + "C" +
         std::to_string(c.clusters) + "I" + std::to_string(c.iterations) + "B" +
         std::to_string(c.bits);
}

class ClusteringCudaTest : public ::testing::TestWithParam<ClusterCase> {};

// Same codes, lengths, initial centroid positions and generator state on both
// devices: the same groups and counts, including the random replacements of
// empty clusters (cases with more clusters than valid codes force those).
TEST_P(ClusteringCudaTest, MatchesCpuExactly) {
  PERFORMER_REQUIRE_CUDA();
  const ClusterCase c = GetParam();
  torch::manual_seed(43);
  const torch::TensorOptions longs = torch::TensorOptions().dtype(torch::kLong);
  // Codes from real hashing (correlated bits), plus a few with bits above
  // `bits` set, which the distance sees as the CPU does.
  const torch::Tensor x = torch::randn({c.n, c.h, c.l, 16});
  const torch::Tensor planes = torch::randn({c.bits, 17});
  torch::Tensor codes = ComputeHashes(x, planes);
  if (c.bits < 62) codes.select(2, 0).bitwise_or_(int64_t{1} << 62);
  const torch::Tensor lengths = torch::randint(0, c.l + 1, {c.n}, longs);
  lengths[0] = c.l;  // at least one full sequence
  const torch::Tensor positions = torch::randint(0, c.l, {c.clusters}, longs);

  torch::manual_seed(1234);
  const HashClusters expected = ClusterHashes(codes, lengths, positions, c.iterations, c.bits);
  torch::manual_seed(1234);
  const HashClusters got =
      ClusterHashes(codes.cuda(), lengths.cuda(), positions.cuda(), c.iterations, c.bits);
  EXPECT_TRUE(got.groups.is_cuda());
  EXPECT_TRUE(torch::equal(got.groups.cpu(), expected.groups))
      << "codes assigned differently: "
      << got.groups.cpu().ne(expected.groups).sum().item<int64_t>();
  EXPECT_TRUE(torch::equal(got.counts.cpu(), expected.counts));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ClusteringCudaTest,
    ::testing::Values(ClusterCase{1, 1, 1, 1, 10, 1}, ClusterCase{2, 3, 37, 5, 10, 16},
                      ClusterCase{4, 2, 300, 20, 5, 32}, ClusterCase{1, 1, 1000, 100, 10, 63},
                      ClusterCase{3, 2, 12, 40, 8, 8},  // empty clusters
                      ClusterCase{64, 1, 50, 7, 0, 20}, ClusterCase{2, 2, 70, 9, 1, 63}),
    Name);

TEST(ClusteringCudaChecks, MixedDevicesAreErrors) {
  PERFORMER_REQUIRE_CUDA();
  const torch::Tensor codes =
      torch::zeros({1, 1, 4}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
  EXPECT_THROW(ClusterHashes(codes, torch::full({1}, 4, torch::kLong),
                             torch::zeros({2}, torch::kLong), 3, 8),
               c10::Error);
}

}  // namespace
}  // namespace performer::kernels
