// The vector decode-step kernel's work layout (kernels/cuda/
// linear_state_step_plan.h), checked on the host: the kernel relies on every
// state element being visited by exactly one (block, thread, lane, period)
// and on a lane's column being the same in every period. Runs everywhere
// (no GPU needed).
#include "kernels/cuda/linear_state_step_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace performer::kernels::cuda {
namespace {

struct PlanShape {
  int64_t rows, features, columns;
};

// Walks the plan the way the kernel does (split s covers periods
// [s P, min((s + 1) P, periods)); thread t loads vector n T + t) and counts
// the visits of each element of one row's state.
void ExpectExactCover(const PlanShape& s, const VectorStepPlan& plan) {
  const int64_t elements = s.features * s.columns;
  std::vector<int> visits(static_cast<size_t>(elements), 0);
  for (int64_t split = 0; split < plan.splits; ++split) {
    const int64_t first = split * plan.periods_per_split;
    const int64_t last = std::min(plan.periods, first + plan.periods_per_split);
    ASSERT_LT(first, last) << "split " << split << " is empty";
    for (int64_t n = first; n < last; ++n) {
      for (int64_t t = 0; t < plan.threads; ++t) {
        for (int64_t u = 0; u < 4; ++u) {
          const int64_t lane = 4 * t + u;
          const int64_t flat = n * plan.period + lane;
          if (flat >= elements) continue;
          const int64_t feature = VectorLaneFeature(lane, n, plan, s.columns);
          const int64_t column = VectorLaneColumn(lane, s.columns);
          ASSERT_EQ(feature * s.columns + column, flat)
              << "lane " << lane << " of period " << n << " names the wrong element";
          ASSERT_LT(feature, s.features);
          ++visits[static_cast<size_t>(flat)];
        }
      }
    }
  }
  for (int64_t i = 0; i < elements; ++i) {
    ASSERT_EQ(visits[static_cast<size_t>(i)], 1)
        << "element " << i << " (feature " << i / s.columns << ", column " << i % s.columns << ")";
  }
}

class VectorStepPlanTest : public ::testing::TestWithParam<PlanShape> {};

TEST_P(VectorStepPlanTest, CoversEveryStateElementOnceWithFixedLaneColumns) {
  const PlanShape s = GetParam();
  for (int sm_count : {1, 132}) {
    SCOPED_TRACE("sm_count " + std::to_string(sm_count));
    const VectorStepPlan plan = MakeVectorStepPlan(s.rows, s.features, s.columns, sm_count);
    ASSERT_TRUE(plan.supported);
    EXPECT_EQ(plan.period, 4 * plan.threads);
    EXPECT_EQ(plan.period % s.columns, 0) << "a period must be whole state rows";
    EXPECT_EQ(plan.features_per_period * s.columns, plan.period);
    EXPECT_GE(plan.threads, 32) << "warp 0 must be whole (it reduces the maxima)";
    EXPECT_LE(plan.threads, kVectorStepMaxThreads);
    EXPECT_GE(plan.splits, 1);
    EXPECT_LE(plan.splits, plan.periods);
    EXPECT_EQ(plan.workspace_floats, plan.splits > 1 ? s.rows * (s.columns + 1) : 0);
    ExpectExactCover(s, plan);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, VectorStepPlanTest,
                         ::testing::Values(PlanShape{8, 256, 65},     // bench model, B = 1
                                           PlanShape{512, 256, 65},   // B = 64
                                           PlanShape{2048, 256, 65},  // B = 256
                                           PlanShape{1, 4, 1}, PlanShape{3, 20, 33},
                                           PlanShape{64, 18, 34}, PlanShape{1, 4, 64},
                                           PlanShape{5, 268, 301}, PlanShape{2, 8, 1023}),
                         [](const ::testing::TestParamInfo<PlanShape>& info) {
                           return "R" + std::to_string(info.param.rows) + "M" +
                                  std::to_string(info.param.features) + "C" +
                                  std::to_string(info.param.columns);
                         });

TEST(VectorStepPlanChecks, SplitsSmallBatchesAndNotLargeOnes) {
  // 8 rows (B = 1, 8 heads) on 132 SMs: split; 2048 rows: one block each.
  EXPECT_GT(MakeVectorStepPlan(8, 256, 65, 132).splits, 1);
  EXPECT_EQ(MakeVectorStepPlan(2048, 256, 65, 132).splits, 1);
  EXPECT_EQ(MakeVectorStepPlan(2048, 256, 65, 132).workspace_floats, 0);
}

TEST(VectorStepPlanChecks, RefusesShapesWithoutWholeVectors) {
  EXPECT_FALSE(MakeVectorStepPlan(4, 17, 33, 132).supported);  // 561 % 4 != 0
  EXPECT_FALSE(MakeVectorStepPlan(4, 1, 1, 132).supported);
  EXPECT_FALSE(MakeVectorStepPlan(0, 4, 4, 132).supported);
  EXPECT_FALSE(MakeVectorStepPlan(1, 4, 1025, 132).supported);  // C > 1024 threads
}

TEST(VectorStepPlanChecks, ByShapePicksTheVectorKernelForManyRowsOnly) {
  EXPECT_FALSE(VectorStepPreferred(MakeVectorStepPlan(512, 256, 65, 132), 512));   // B = 64
  EXPECT_TRUE(VectorStepPreferred(MakeVectorStepPlan(2048, 256, 65, 132), 2048));  // B = 256
  EXPECT_TRUE(VectorStepPreferred(MakeVectorStepPlan(kVectorStepMinRows, 256, 65, 132),
                                  kVectorStepMinRows));
  // A shape the vector kernel does not take stays with the row blocks.
  EXPECT_FALSE(VectorStepPreferred(MakeVectorStepPlan(4096, 17, 33, 132), 4096));
}

}  // namespace
}  // namespace performer::kernels::cuda
