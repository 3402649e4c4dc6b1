// Hamming k-means of kernels/cuda/clustering_cuda.cu run on the host
// (cuda_emulation.h): from the same seeds, the CPU kernel's groups and
// counts exactly, the random replacements of empty clusters included.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "kernels/cpu/clustering_cpu.h"
#include "kernels/hashing.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

struct ClusterCase {
  int64_t n, h, l, clusters, iterations, bits;
};

TEST(ClusteringEmulationTest, FromTheSameSeedsTheCpusClusters) {
  const ClusterCase cases[] = {{2, 3, 37, 5, 10, 16},
                               {3, 2, 12, 40, 8, 8},  // more clusters than codes: empty ones
                               {2, 2, 70, 9, 1, 63}};
  for (const ClusterCase& c : cases) {
    SCOPED_TRACE("L " + std::to_string(c.l) + " C " + std::to_string(c.clusters));
    torch::manual_seed(43);
    const torch::Tensor codes =
        ComputeHashes(torch::randn({c.n, c.h, c.l, 16}), torch::randn({c.bits, 17}));
    torch::Tensor lengths = torch::randint(0, c.l + 1, {c.n}, torch::kLong);
    lengths[0] = c.l;
    const torch::Tensor positions = torch::randint(0, c.l, {c.clusters}, torch::kLong);
    const torch::Tensor seeds = torch::randint(int64_t{1} << 62, {c.n * c.h}, torch::kLong);
    torch::Tensor groups = torch::empty({c.n, c.h, c.l}, torch::kLong);
    torch::Tensor counts = torch::empty({c.n, c.h, c.clusters}, torch::kLong);
    const char* error = cuda_emulated::ClusterHashesForward(
        codes.data_ptr<int64_t>(), lengths.data_ptr<int64_t>(), positions.data_ptr<int64_t>(),
        seeds.data_ptr<int64_t>(), groups.data_ptr<int64_t>(), counts.data_ptr<int64_t>(),
        c.n * c.h, c.h, c.l, c.clusters, c.iterations, c.bits, nullptr);
    ASSERT_EQ(error, nullptr) << error;
    const HashClusters expected =
        cpu::ClusterHashesCpu(codes, lengths, positions, c.iterations, c.bits, seeds);
    EXPECT_TRUE(torch::equal(groups, expected.groups));
    EXPECT_TRUE(torch::equal(counts, expected.counts));
  }
}

}  // namespace
}  // namespace performer::kernels
