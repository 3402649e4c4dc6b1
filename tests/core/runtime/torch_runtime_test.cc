#include "core/runtime/torch_runtime.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace performer {
namespace {

TEST(TorchRuntimeTest, SetsThreadsExplicitly) {
  TorchRuntimeInfo info = ConfigureTorchRuntime(2);
  EXPECT_EQ(info.intra_op_threads, 2);
  EXPECT_EQ(torch::get_num_threads(), 2);
  info = ConfigureTorchRuntime(1);
  EXPECT_EQ(info.intra_op_threads, 1);
}

// tools/install_deps.sh installs OpenBLAS; without it LibTorch's matmuls run
// through the reference BLAS, ~25x slower.
TEST(TorchRuntimeTest, UsesAnOptimizedBlas) {
  TorchRuntimeInfo info = ConfigureTorchRuntime(0);
  EXPECT_TRUE(info.blas_is_optimized) << DescribeTorchRuntime(info);
  EXPECT_NE(DescribeTorchRuntime(info).find("intra-op threads"), std::string::npos);
}

}  // namespace
}  // namespace performer
