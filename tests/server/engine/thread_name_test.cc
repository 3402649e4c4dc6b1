#include "server/engine/thread_name.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "server/engine/compute_thread.h"

namespace performer::server {
namespace {

TEST(ThreadName, NamesTheCallingThreadOnly) {
  std::string inside, before = ThisThreadName();
  std::thread([&inside] {
    NameThisThread("probe");
    inside = ThisThreadName();
  }).join();
  EXPECT_EQ(inside, "probe");
  EXPECT_EQ(ThisThreadName(), before);
}

TEST(ThreadName, CutsNamesToWhatLinuxKeeps) {
  std::string inside;
  std::thread([&inside] {
    NameThisThread("a-name-longer-than-fifteen");
    inside = ThisThreadName();
  }).join();
  EXPECT_EQ(inside, "a-name-longer-t");
}

TEST(ThreadName, TheComputeThreadIsNamed) {
  EXPECT_EQ(RunOnComputeThread([] { return ThisThreadName(); }), "compute");
}

}  // namespace
}  // namespace performer::server
