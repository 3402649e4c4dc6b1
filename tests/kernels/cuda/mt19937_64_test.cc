// The device-side std::mt19937_64 (kernels/cuda/mt19937_64.h), checked on the
// host: the CUDA clustering kernel must draw the same empty-cluster
// replacements as the CPU kernel. Runs everywhere (no GPU needed).
#include "kernels/cuda/mt19937_64.h"

#include <gtest/gtest.h>

#include <random>

namespace performer::kernels::cuda {
namespace {

TEST(ClusteringMt19937Test, MatchesStdMt19937_64) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{5489}, (uint64_t{1} << 62) - 7,
                        uint64_t{0x123456789abcdefULL}}) {
    std::mt19937_64 expected(seed);
    Mt19937_64 got;
    got.Seed(seed);
    // Past two twists of the state.
    for (int i = 0; i < 1000; ++i)
      ASSERT_EQ(got.Next(), expected()) << "seed " << seed << " draw " << i;
  }
}

}  // namespace
}  // namespace performer::kernels::cuda
