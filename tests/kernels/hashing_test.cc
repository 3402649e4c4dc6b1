#include "kernels/hashing.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace performer::kernels {
namespace {

// Plain LibTorch reference: bit b = [x . p_b[:E] > p_b[E]].
torch::Tensor ReferenceHashes(const torch::Tensor& x, const torch::Tensor& planes) {
  const int64_t dims = x.size(-1);
  const int64_t bits = planes.size(0);
  torch::Tensor projections = torch::matmul(x, planes.narrow(1, 0, dims).t());
  torch::Tensor set = projections.gt(planes.select(1, dims)).to(torch::kInt64);
  torch::Tensor weights =
      torch::ones({bits}, torch::kInt64).bitwise_left_shift(torch::arange(bits, torch::kInt64));
  return (set * weights).sum(-1);
}

TEST(ComputeHashesTest, MatchesReferenceInDoubleForAnyBatchShape) {
  torch::manual_seed(0);
  torch::Tensor x = torch::randn({2, 3, 7, 5}, torch::kDouble);
  torch::Tensor planes = torch::randn({63, 6}, torch::kDouble);
  torch::Tensor hashes = ComputeHashes(x, planes);
  ASSERT_EQ(hashes.sizes(), torch::IntArrayRef({2, 3, 7}));
  ASSERT_EQ(hashes.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(hashes, ReferenceHashes(x, planes)));
  EXPECT_GE(hashes.min().item<int64_t>(), 0);  // 63 bits keep codes non-negative.
}

TEST(ComputeHashesTest, Float32DiffersFromReferenceOnlyOnPlaneBoundaries) {
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({200, 8});
  torch::Tensor planes = torch::randn({16, 9});
  torch::Tensor hashes = ComputeHashes(x, planes);
  torch::Tensor expected = ReferenceHashes(x, planes);
  torch::Tensor margin =
      (torch::matmul(x, planes.narrow(1, 0, 8).t()) - planes.select(1, 8)).abs();  // (200, 16)
  torch::Tensor differing_bits = hashes.bitwise_xor(expected);
  for (int64_t b = 0; b < 16; ++b) {
    torch::Tensor flipped = differing_bits.bitwise_right_shift(b).bitwise_and(1).to(torch::kBool);
    if (flipped.any().item<bool>()) {
      EXPECT_LT(margin.select(1, b).masked_select(flipped).max().item<float>(), 1e-5);
    }
  }
}

TEST(ComputeHashesTest, ZeroOffsetsGiveSignHashes) {
  torch::Tensor x = torch::tensor({{1.0f, -2.0f}, {-1.0f, 0.5f}});
  torch::Tensor planes = torch::tensor({{1.0f, 0.0f, 0.0f}, {0.0f, 1.0f, 0.0f}});
  torch::Tensor hashes = ComputeHashes(x, planes);
  EXPECT_EQ(hashes[0].item<int64_t>(), 1);  // x0 > 0, x1 < 0
  EXPECT_EQ(hashes[1].item<int64_t>(), 2);  // x0 < 0, x1 > 0
}

TEST(ComputeHashesTest, OffsetIsTheLastColumn) {
  torch::Tensor x = torch::tensor({{1.0f}});
  EXPECT_EQ(ComputeHashes(x, torch::tensor({{1.0f, 0.5f}})).item<int64_t>(), 1);
  EXPECT_EQ(ComputeHashes(x, torch::tensor({{1.0f, 1.5f}})).item<int64_t>(), 0);
  EXPECT_EQ(ComputeHashes(x, torch::tensor({{1.0f, 1.0f}})).item<int64_t>(), 0);  // strict >
}

TEST(ComputeHashesTest, RejectsBadArguments) {
  torch::Tensor x = torch::randn({4, 3});
  EXPECT_THROW(ComputeHashes(x, torch::randn({64, 4})), c10::Error);  // > 63 bits
  EXPECT_THROW(ComputeHashes(x, torch::randn({8, 3})), c10::Error);   // no offset column
  EXPECT_THROW(ComputeHashes(x, torch::randn({8, 4}, torch::kDouble)), c10::Error);  // dtype
  EXPECT_THROW(ComputeHashes(x.to(torch::kInt64), torch::randn({8, 4})), c10::Error);
}

}  // namespace
}  // namespace performer::kernels
