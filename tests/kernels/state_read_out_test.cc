// kernels::StateReadOut and FavorProjectedReadOut are CUDA ops for
// row-invariant CUDA only: on the CPU they are not supported and say so
// (their CUDA tests are in tests/kernels/cuda, their kernel runs on the host
// under emulation).
#include "kernels/state_read_out.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>

namespace performer::kernels {
namespace {

void ExpectRefusal(const std::function<void()>& read_out, const std::string& message) {
  try {
    read_out();
    FAIL() << "a CPU state was taken";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(StateReadOutTest, IsNotSupportedOnTheCpuAndSaysSo) {
  const torch::Tensor state = torch::rand({2, 1, 4, 3});
  EXPECT_FALSE(StateReadOutSupported(state));
  ExpectRefusal(
      [&] {
        StateReadOut(state, torch::rand({2, 1, 4}));
      },
      "StateReadOut: state must be a float32 (R, H, M, E + 1) CUDA tensor");
  ExpectRefusal(
      [&] {
        FavorProjectedReadOut(state, torch::randn({2, 1, 8}), torch::randn({8, 4}), 1e-4);
      },
      "FavorProjectedReadOut: state must be a float32 (R, H, M, E + 1) CUDA tensor");
}

}  // namespace
}  // namespace performer::kernels
