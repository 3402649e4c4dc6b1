#include "server/process/open_file_limit.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>

namespace performer::server {
namespace {

TEST(OpenFileLimitTest, TheSoftLimitRisesToTheHardOne) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit lowered = before;
  lowered.rlim_cur = std::min<rlim_t>(before.rlim_max, 256);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const uint64_t raised = RaiseOpenFileLimit();
  rlimit after{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(raised, static_cast<uint64_t>(after.rlim_cur));
  EXPECT_GE(after.rlim_cur, lowered.rlim_cur);
  if (before.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(after.rlim_cur, before.rlim_max);
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
}

}  // namespace
}  // namespace performer::server
