// AppendKeyValues: a call's keys and values land at each row's positions,
// and the window's visibility follows each token's own position.
#include "core/recurrent/key_value_slots.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace performer {
namespace {

// `positions.size()` empty rows of a key/value state of `shape`.
SlotRows EmptyRows(const SlotShape& shape, const std::vector<int64_t>& positions,
                   int64_t live_length) {
  SlotRows rows;
  for (const SlotTensorSpec& spec : KeyValueSlotSpec(shape)) {
    std::vector<int64_t> sizes{static_cast<int64_t>(positions.size())};
    sizes.insert(sizes.end(), spec.shape.begin(), spec.shape.end());
    rows.tensors.push_back(torch::zeros(sizes));
  }
  rows.positions = torch::tensor(positions, torch::kLong);
  rows.live_length = live_length;
  return rows;
}

TEST(KeyValueSlotsTest, StoresAtEachRowsPositionsAndSeesUpToEachToken) {
  const SlotShape shape{/*heads=*/2, /*query_dims=*/3, /*value_dims=*/4, /*max_length=*/6};
  SlotRows rows = EmptyRows(shape, {1, 3}, /*live_length=*/3 + 2);
  torch::manual_seed(1);
  const torch::Tensor keys = torch::randn({2, 2, 2, 3});
  const torch::Tensor values = torch::randn({2, 2, 2, 4});

  const KeyValueWindow window = AppendKeyValues(keys, values, rows);

  EXPECT_EQ(window.keys.sizes(), (std::vector<int64_t>{2, 5, 2, 3}));
  EXPECT_EQ(window.values.sizes(), (std::vector<int64_t>{2, 5, 2, 4}));
  EXPECT_TRUE(torch::equal(window.keys[0].narrow(0, 1, 2), keys[0]));
  EXPECT_TRUE(torch::equal(window.keys[1].narrow(0, 3, 2), keys[1]));
  EXPECT_TRUE(torch::equal(window.values[1].narrow(0, 3, 2), values[1]));
  EXPECT_EQ(window.keys[0][0].abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(torch::equal(window.last, torch::tensor({{1, 2}, {3, 4}}, torch::kLong)));

  const torch::Tensor visible = window.Visible();
  ASSERT_EQ(visible.sizes(), (std::vector<int64_t>{2, 1, 2, 5}));
  const torch::Tensor expected = torch::tensor(
      {{{{1, 1, 0, 0, 0}, {1, 1, 1, 0, 0}}}, {{{1, 1, 1, 1, 0}, {1, 1, 1, 1, 1}}}}, torch::kBool);
  EXPECT_TRUE(torch::equal(visible, expected));
}

TEST(KeyValueSlotsTest, RefusesAWindowPastThePool) {
  const SlotShape shape{/*heads=*/1, /*query_dims=*/2, /*value_dims=*/2, /*max_length=*/4};
  SlotRows rows = EmptyRows(shape, {3}, /*live_length=*/5);
  EXPECT_THROW(AppendKeyValues(torch::zeros({1, 2, 1, 2}), torch::zeros({1, 2, 1, 2}), rows),
               c10::Error);
}

}  // namespace
}  // namespace performer
