// kernels::FavorProjectedReadOut is a CUDA op for row-invariant CUDA only:
// on the CPU it is not supported and says so (its CUDA tests are in
// tests/kernels/cuda, its kernel runs on the host under emulation).
#include "kernels/favor_projected_read_out.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

namespace performer::kernels {
namespace {

TEST(FavorProjectedReadOutTest, IsNotSupportedOnTheCpuAndSaysSo) {
  const torch::Tensor state = torch::rand({2, 1, 4, 3});
  EXPECT_FALSE(FavorProjectedReadOutSupported(state));
  try {
    FavorProjectedReadOut(state, torch::randn({2, 1, 8}), torch::randn({8, 4}), 1e-4);
    FAIL() << "a CPU state was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "FavorProjectedReadOut: state must be a float32 (R, H, M, E + 1) CUDA tensor"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace performer::kernels
