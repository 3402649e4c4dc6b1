// Hashing of kernels/cuda/hashing_cuda.cu run on the host
// (cuda_emulation.h): the same codes as the CPU op, bit for bit, with planes
// staged in shared memory and read from global memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "kernels/hashing.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

template <typename T>
void ExpectSameCodes(torch::ScalarType dtype, int64_t rows, int64_t dims, int64_t bits) {
  SCOPED_TRACE("E " + std::to_string(dims) + " bits " + std::to_string(bits));
  torch::manual_seed(41);
  const torch::Tensor x = torch::randn({rows, dims}, dtype);
  const torch::Tensor planes = torch::randn({bits, dims + 1}, dtype);
  torch::Tensor codes = torch::empty({rows}, torch::kLong);
  const char* error = cuda_emulated::ComputeHashesForward<T>(
      x.data_ptr<T>(), planes.data_ptr<T>(), codes.data_ptr<int64_t>(), rows, dims, bits, nullptr);
  ASSERT_EQ(error, nullptr) << error;
  EXPECT_TRUE(torch::equal(codes, ComputeHashes(x, planes)));
}

TEST(HashingEmulationTest, TheCodesAreTheCpus) {
  ExpectSameCodes<float>(torch::kFloat, 70, 33, 31);
  ExpectSameCodes<double>(torch::kDouble, 70, 64, 63);
  ExpectSameCodes<float>(torch::kFloat, 5, 600, 40);  // planes past the shared-memory stage
}

}  // namespace
}  // namespace performer::kernels
