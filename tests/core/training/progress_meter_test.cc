#include "core/training/progress_meter.h"

#include <gtest/gtest.h>

#include <sstream>

namespace performer::training {
namespace {

StepReport Report(int64_t step, double loss) {
  StepReport r;
  r.step = step;
  r.total_steps = 10;
  r.loss = loss;
  r.lr = 1e-3;
  r.tokens = 1000;
  r.seconds = 0.5;
  return r;
}

TEST(TrainProgressMeterTest, FormatsDurationsAndCounts) {
  EXPECT_EQ(FormatDuration(42.4), "42s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(7380), "2h03m");
  EXPECT_EQ(FormatCount(850), "850");
  EXPECT_EQ(FormatCount(12345), "12.3k");
  EXPECT_EQ(FormatCount(1250000), "1.25M");
}

TEST(TrainProgressMeterTest, LogFileGetsOneLineEveryNStepsAndTheLast) {
  std::ostringstream out;
  ProgressMeter meter(out, /*terminal=*/false, /*every=*/4);
  for (int64_t step = 1; step <= 10; ++step) meter.OnStep(Report(step, step));
  meter.Finish();
  // Lines at steps 4, 8 and 10; loss is the mean since the previous line.
  EXPECT_EQ(out.str(),
            "step 4/10 | loss 2.5000 | lr 1.00e-03 | 2.0k tok/s | ETA 3s\n"
            "step 8/10 | loss 6.5000 | lr 1.00e-03 | 2.0k tok/s | ETA 1s\n"
            "step 10/10 | loss 9.5000 | lr 1.00e-03 | 2.0k tok/s | ETA 0s\n");
}

TEST(TrainProgressMeterTest, TerminalRedrawsOneLineAndKeepsValidation) {
  std::ostringstream out;
  ProgressMeter meter(out, /*terminal=*/true, /*every=*/4);
  meter.OnStep(Report(1, 3.0));
  meter.OnStep(Report(2, 2.0));
  meter.OnValidation(2, 2.5);
  meter.OnStep(Report(3, 1.0));
  meter.Finish();
  const std::string s = out.str();
  EXPECT_EQ(s.find('\n'), s.find("\nstep 2: validation loss 2.5000"));
  EXPECT_NE(s.find("\r\033[Kstep 2/10 | loss 2.0000"), std::string::npos);
  EXPECT_NE(s.find("\r\033[Kstep 3/10 | loss 1.0000 | val 2.5000"), std::string::npos);
  EXPECT_EQ(s.back(), '\n');
}

}  // namespace
}  // namespace performer::training
