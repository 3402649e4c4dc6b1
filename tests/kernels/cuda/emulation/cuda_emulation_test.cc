// The emulator itself (cuda_emulation.h): the barriers order the threads of
// a block, a warp and a cluster; the shuffles; the launches the CUDA
// runtime refuses; a barrier that cannot be met stops the process.
#include "tests/kernels/cuda/emulation/cuda_emulation.h"

#include <gtest/gtest.h>

#include <vector>

#include "tests/kernels/cuda/emulation/include/cooperative_groups.h"

namespace performer::cuda_emulation {
namespace {

// Each thread writes its index, and after the barrier reads its
// neighbour's; returns through `out`.
__global__ void Neighbours(int* out) {
  int* shared = DynamicShared<int>();
  const int t = static_cast<int>(threadIdx.x), n = static_cast<int>(blockDim.x);
  shared[t] = t + static_cast<int>(blockIdx.x) * 1000;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = shared[(t + 1) % n];
}

TEST(CudaEmulationTest, ABarrierOrdersTheThreadsOfEachBlock) {
  std::vector<int> out(size_t{3} * 64, -1);
  Launch(Neighbours, dim3(3), dim3(64), 64 * sizeof(int))(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 64; ++t) EXPECT_EQ(out[b * 64 + t], (t + 1) % 64 + b * 1000);
  }
}

__global__ void ButterflySum(float* out) {
  float value = static_cast<float>(threadIdx.x);
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(~0u, value, offset);
  out[threadIdx.x] = value;
}

TEST(CudaEmulationTest, EveryLaneOfAWarpGetsTheButterflySum) {
  std::vector<float> out(64, -1.0f);
  Launch(ButterflySum, dim3(1), dim3(64))(out.data());
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], t < 32 ? 496.0f : 1520.0f) << t;
}

// Each lane reads lane (lane * 3) % 32's value of its own warp.
__global__ void IndexedShuffle(int* out) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  out[threadIdx.x] = __shfl_sync(~0u, static_cast<int>(threadIdx.x) * 10, (lane * 3) % 32);
}

TEST(CudaEmulationTest, AShuffleReadsTheNamedLaneOfItsWarp) {
  std::vector<int> out(64, -1);
  Launch(IndexedShuffle, dim3(1), dim3(64))(out.data());
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], ((t / 32) * 32 + (t % 32) * 3 % 32) * 10) << t;
}

// Block rank r of a cluster of 4 reads rank (r + 1) % 4's shared value
// after the cluster's sync.
__global__ void ClusterNeighbours(int* out) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  int* shared = DynamicShared<int>();
  const unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) shared[0] = static_cast<int>(blockIdx.x);
  cluster.sync();
  if (threadIdx.x == 0) out[blockIdx.x] = *cluster.map_shared_rank(shared, (rank + 1) % 4);
  cluster.sync();
}

TEST(CudaEmulationTest, AClustersBlocksSeeEachOthersSharedMemory) {
  std::vector<int> out(8, -1);
  LaunchCluster(dim3(4), ClusterNeighbours, dim3(8), dim3(32), sizeof(int))(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out, (std::vector<int>{1, 2, 3, 0, 5, 6, 7, 4}));
}

__global__ void Nothing() {}

TEST(CudaEmulationTest, LaunchesTheRuntimeRefusesAreRefused) {
  Launch(Nothing, dim3(1), dim3(1025))();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  Launch(Nothing, dim3(1, 65536), dim3(32))();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // Over 48 KiB of dynamic shared memory needs the kernel's attribute, up
  // to the device's 227 KiB.
  Launch(Nothing, dim3(1), dim3(32), size_t{64} * 1024)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(Nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  Launch(Nothing, dim3(1), dim3(32), size_t{64} * 1024)();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(Nothing, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
            cudaErrorInvalidValue);
  LaunchCluster(dim3(3), Nothing, dim3(8), dim3(32))();  // 8 blocks in clusters of 3
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

// Lane 0 waits at the block's barrier while the warp's other lanes wait at
// a warp barrier: neither can be met.
__global__ void Divergent() {
  if (threadIdx.x == 0) {
    __syncthreads();
  } else {
    __syncwarp();
  }
}

TEST(CudaEmulationDeathTest, BarriersThatCannotBeMetStopTheProcess) {
  EXPECT_DEATH(Launch(Divergent, dim3(1), dim3(32))(), "cannot all be met");
}

}  // namespace
}  // namespace performer::cuda_emulation
