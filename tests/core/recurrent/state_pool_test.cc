// StatePool's rows taken out and put back (Read / Write): bit copies with
// their positions, refused when the layout differs, rows others untouched.
#include "core/recurrent/state_pool.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

namespace performer {
namespace {

std::vector<std::vector<SlotTensorSpec>> Layout() {
  return {{{{2, 3}, 0.0}, {{2}, std::numeric_limits<float>::lowest()}}, {}, {{{4}, 0.0}}};
}

TEST(StatePoolTest, ReadThenWriteCopiesARowExactly) {
  StatePool pool(Layout(), 3, torch::TensorOptions());
  torch::manual_seed(3);
  std::vector<SlotRows> rows = pool.Rows(0, 3, 1);
  for (SlotRows& layer : rows) {
    for (torch::Tensor& t : layer.tensors) t.copy_(torch::randn(t.sizes()));
  }
  rows.front().positions.copy_(torch::tensor({5, 6, 7}));
  const StateSnapshot snapshot = pool.Read(1);
  EXPECT_EQ(snapshot.position, 6);
  ASSERT_EQ(snapshot.layers.size(), 3u);
  EXPECT_TRUE(snapshot.layers[1].empty());
  EXPECT_EQ(snapshot.bytes(), pool.BytesPerSequence());
  // The snapshot is a copy: changing the pool does not change it.
  const torch::Tensor before = snapshot.layers[0][0].clone();
  rows[0].tensors[0].fill_(42);
  EXPECT_TRUE(torch::equal(snapshot.layers[0][0], before));

  ASSERT_TRUE(pool.Write(2, snapshot).ok());
  const StateSnapshot copied = pool.Read(2);
  EXPECT_EQ(copied.position, 6);
  for (size_t i = 0; i < snapshot.layers.size(); ++i) {
    for (size_t j = 0; j < snapshot.layers[i].size(); ++j) {
      EXPECT_TRUE(torch::equal(copied.layers[i][j], snapshot.layers[i][j])) << i << "," << j;
    }
  }
  EXPECT_EQ(pool.Read(0).position, 5);  // other rows untouched
}

TEST(StatePoolTest, WriteRefusesAnotherLayoutAndLeavesTheRow) {
  StatePool pool(Layout(), 2, torch::TensorOptions());
  StateSnapshot good = pool.Read(0);
  good.position = 3;

  StateSnapshot fewer = good;
  fewer.layers.pop_back();
  StateSnapshot shape = good;
  shape.layers[2][0] = torch::zeros({5});
  StateSnapshot dtype = good;
  dtype.layers[0][1] = torch::zeros({2}, torch::kDouble);
  StateSnapshot tensors = good;
  tensors.layers[1].push_back(torch::zeros({1}));
  for (const StateSnapshot* bad : {&fewer, &shape, &dtype, &tensors}) {
    const absl::Status status = pool.Write(1, *bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_EQ(pool.Read(1).position, 0);
  }
  EXPECT_TRUE(pool.CheckLayout(good).ok());
  EXPECT_TRUE(pool.Write(1, good).ok());
  EXPECT_EQ(pool.Read(1).position, 3);
}

TEST(StatePoolTest, KeepsTheFloatingDtypeItIsGiven) {
  StatePool doubles(Layout(), 1, torch::TensorOptions().dtype(torch::kDouble));
  EXPECT_EQ(doubles.Read(0).layers[0][0].scalar_type(), torch::kDouble);
  StatePool floats(Layout(), 1, torch::TensorOptions());
  EXPECT_EQ(floats.Read(0).layers[0][0].scalar_type(), torch::kFloat);
  EXPECT_EQ(floats.Read(0).layers[0][1][0].item<float>(), std::numeric_limits<float>::lowest());
}

}  // namespace
}  // namespace performer
