#include "core/masks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace performer {
namespace {

TEST(MaskTest, FullMaskIsAllOnesAndLengthShaped) {
  Mask m = Mask::Full(2, 4);
  EXPECT_TRUE(m.all_ones());
  EXPECT_FALSE(m.lower_triangular());
  EXPECT_EQ(m.shape(), (std::vector<int64_t>{2, 4}));
  ASSERT_TRUE(m.lengths().ok());
  EXPECT_TRUE(torch::equal(*m.lengths(), torch::tensor({4, 4}, torch::kLong)));
}

TEST(MaskTest, FromBoolRejectsNonBool) {
  absl::StatusOr<Mask> m = Mask::FromBool(torch::ones({2, 2}));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "FullMask expects the mask to be bool");
}

TEST(MaskTest, NonLengthMaskHasNoLengths) {
  absl::StatusOr<Mask> m = Mask::FromBool(torch::tensor({false, true}).reshape({1, 2}));
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->is_length_mask());
  EXPECT_EQ(m->lengths().status().message(), "The mask is not a length mask");
  EXPECT_FALSE(m->lower_triangular());
}

TEST(MaskTest, LengthMaskMatrixAndDefaultMaxLen) {
  Mask m = Mask::Lengths(torch::tensor({1, 3}, torch::kLong));
  EXPECT_EQ(m.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(torch::equal(m.bool_matrix(),
                           torch::tensor({true, false, false, true, true, true}).reshape({2, 3})));
  EXPECT_FALSE(m.all_ones());
  // max_len 0 behaves like "not given", as in Python.
  EXPECT_EQ(Mask::Lengths(torch::tensor({2, 2}, torch::kLong), 0).shape(),
            (std::vector<int64_t>{2, 2}));
}

TEST(MaskTest, TriangularCausal) {
  Mask m = Mask::TriangularCausal(3);
  EXPECT_TRUE(m.lower_triangular());
  EXPECT_FALSE(m.all_ones());
  EXPECT_TRUE(torch::equal(m.bool_matrix(), torch::ones({3, 3}, torch::kBool).tril()));
  EXPECT_TRUE(Mask::TriangularCausal(1).all_ones());
}

TEST(MaskTest, AdditiveMatrices) {
  Mask m = Mask::Lengths(torch::tensor({1}, torch::kLong), 2);
  torch::Tensor add = m.additive_matrix();
  EXPECT_EQ(add[0][0].item<float>(), 0.0f);
  EXPECT_TRUE(std::isinf(add[0][1].item<float>()));
  torch::Tensor fin = m.additive_matrix_finite();
  EXPECT_TRUE(std::signbit(fin[0][0].item<float>()));
  EXPECT_FLOAT_EQ(fin[0][1].item<float>(), -1e24f);
}

TEST(MaskTest, WideLowerTriangularFullMaskCountsAsCausal) {
  absl::StatusOr<Mask> m = Mask::FromBool(torch::ones({2, 3}, torch::kBool).tril());
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->lower_triangular());
}

}  // namespace
}  // namespace performer
