#include "core/training/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace performer::training {
namespace {

LrSchedule Make(double peak, int64_t warmup, int64_t total, double ratio) {
  LrSchedule s;
  s.peak_lr = peak;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.min_lr_ratio = ratio;
  return s;
}

TEST(LrScheduleTest, WarmsUpLinearlyToThePeak) {
  const LrSchedule s = Make(1e-3, 4, 104, 0.1);
  EXPECT_DOUBLE_EQ(s.At(0), 0.25e-3);
  EXPECT_DOUBLE_EQ(s.At(1), 0.5e-3);
  EXPECT_DOUBLE_EQ(s.At(3), 1e-3);
  EXPECT_DOUBLE_EQ(s.At(4), 1e-3);  // first cosine step: progress 0
}

TEST(LrScheduleTest, DecaysAlongACosineToTheFloor) {
  const LrSchedule s = Make(1e-3, 4, 104, 0.1);
  // Half-way through the 100 decay steps the rate is half-way between peak and floor.
  EXPECT_NEAR(s.At(54), 0.55e-3, 1e-15);
  // A quarter of the way: floor + (peak - floor) (1 + cos(pi/4)) / 2.
  EXPECT_NEAR(s.At(29), 1e-4 + 9e-4 * (1 + std::cos(M_PI / 4)) / 2, 1e-15);
  for (int64_t step = 5; step < 104; ++step) EXPECT_LT(s.At(step), s.At(step - 1)) << step;
  EXPECT_GT(s.At(103), 1e-4);
  EXPECT_DOUBLE_EQ(s.At(104), 1e-4);
  EXPECT_DOUBLE_EQ(s.At(1000), 1e-4);
}

TEST(LrScheduleTest, NoWarmUpStartsAtThePeakAndZeroFloorEndsNearZero) {
  const LrSchedule s = Make(2.0, 0, 10, 0.0);
  EXPECT_DOUBLE_EQ(s.At(0), 2.0);
  EXPECT_NEAR(s.At(9), 2.0 * (1 + std::cos(M_PI * 0.9)) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(s.At(10), 0.0);
}

TEST(LrScheduleTest, ValidateRejectsNonsense) {
  EXPECT_TRUE(Make(1e-3, 10, 100, 0.1).Validate().ok());
  EXPECT_FALSE(Make(0.0, 10, 100, 0.1).Validate().ok());
  EXPECT_FALSE(Make(1e-3, -1, 100, 0.1).Validate().ok());
  EXPECT_FALSE(Make(1e-3, 10, 0, 0.1).Validate().ok());
  EXPECT_FALSE(Make(1e-3, 10, 100, 1.5).Validate().ok());
}

}  // namespace
}  // namespace performer::training
