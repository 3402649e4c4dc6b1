// StateSnapshot::OnHost: a snapshot read on a GPU copied out in one
// transfer, exactly; a snapshot already on the host kept as it is.
#include "core/recurrent/state_snapshot.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "core/recurrent/state_pool.h"
#include "tests/testing/cuda_device.h"

namespace performer {
namespace {

// Two layers of two tensors and one of none, the second with a -inf empty
// value (a running key maximum's).
StatePool RandomPool(const torch::TensorOptions& options) {
  const std::vector<std::vector<SlotTensorSpec>> layout = {
      {{{3, 2}, 0.0}, {{3}, -std::numeric_limits<double>::infinity()}}, {}, {{{5}, 0.0}}};
  StatePool pool(layout, 3, options);
  torch::manual_seed(11);
  std::vector<SlotRows> rows = pool.Rows(0, 3, 1);
  for (SlotRows& layer : rows) {
    for (torch::Tensor& t : layer.tensors) t.copy_(torch::randn(t.sizes()));
  }
  rows.front().positions.copy_(torch::tensor({4, 9, 2}));
  return pool;
}

TEST(StateSnapshotTest, OnHostKeepsAHostSnapshotAsItIs) {
  const StatePool pool = RandomPool(torch::TensorOptions());
  const StateSnapshot snapshot = pool.Read(1);
  const StateSnapshot host = snapshot.OnHost();
  EXPECT_EQ(host.position, 9);
  ASSERT_EQ(host.layers.size(), snapshot.layers.size());
  for (size_t i = 0; i < host.layers.size(); ++i) {
    ASSERT_EQ(host.layers[i].size(), snapshot.layers[i].size());
    for (size_t j = 0; j < host.layers[i].size(); ++j) {
      EXPECT_EQ(host.layers[i][j].data_ptr(), snapshot.layers[i][j].data_ptr()) << i << "," << j;
    }
  }
}

TEST(StateSnapshotCudaTest, OnHostCopiesEveryTensorOutExactly) {
  PERFORMER_REQUIRE_CUDA();
  StatePool pool = RandomPool(torch::TensorOptions().device(torch::kCUDA));
  const StateSnapshot on_device = pool.Read(1);
  const StateSnapshot host = on_device.OnHost();
  EXPECT_EQ(host.position, 9);
  EXPECT_EQ(host.bytes(), on_device.bytes());
  ASSERT_EQ(host.layers.size(), on_device.layers.size());
  for (size_t i = 0; i < host.layers.size(); ++i) {
    ASSERT_EQ(host.layers[i].size(), on_device.layers[i].size());
    for (size_t j = 0; j < host.layers[i].size(); ++j) {
      EXPECT_TRUE(on_device.layers[i][j].is_cuda()) << i << "," << j;
      EXPECT_TRUE(host.layers[i][j].is_cpu()) << i << "," << j;
      EXPECT_TRUE(torch::equal(host.layers[i][j], on_device.layers[i][j].cpu())) << i << "," << j;
    }
  }
  // Written into another row, the host copy gives that row the state.
  ASSERT_TRUE(pool.Write(2, host).ok());
  const StateSnapshot copied = pool.Read(2);
  EXPECT_EQ(copied.position, 9);
  for (size_t i = 0; i < copied.layers.size(); ++i) {
    for (size_t j = 0; j < copied.layers[i].size(); ++j) {
      EXPECT_TRUE(torch::equal(copied.layers[i][j], on_device.layers[i][j])) << i << "," << j;
    }
  }
}

}  // namespace
}  // namespace performer
