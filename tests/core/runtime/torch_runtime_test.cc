#include "core/runtime/torch_runtime.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

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

#if defined(__GLIBC__)
// A block of a few MiB comes from the heap, not from a mapping of its own
// (glibc's default maps every block above 128 KiB).
TEST(TorchRuntimeTest, ServesLargeBuffersFromTheHeap) {
  ASSERT_TRUE(ConfigureTorchRuntime(1).large_buffers_from_heap);
  const size_t mapped_before = mallinfo2().hblks;
  void* block = std::malloc(static_cast<size_t>(kHeapAllocationBytes) / 8);
  ASSERT_NE(block, nullptr);
  static_cast<volatile char*>(block)[0] = 1;
  EXPECT_EQ(mallinfo2().hblks, mapped_before);
  std::free(block);
}
#endif

}  // namespace
}  // namespace performer
