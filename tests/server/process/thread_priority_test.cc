#include "server/process/thread_priority.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "server/engine/thread_name.h"

namespace performer::server {
namespace {

int NiceOf(pid_t tid) {
  errno = 0;
  return getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
}

pid_t ThisTid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

// A thread that names itself, reports its id and waits to be released.
class ParkedThread {
 public:
  explicit ParkedThread(const std::string& name) {
    std::promise<pid_t> tid;
    std::future<pid_t> started = tid.get_future();
    thread_ = std::thread([this, name, &tid] {
      NameThisThread(name);
      tid.set_value(ThisTid());
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return released_; });
    });
    tid_ = started.get();
  }
  ~ParkedThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      released_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  pid_t tid() const { return tid_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::thread thread_;
  pid_t tid_ = 0;
};

TEST(ThreadPriorityTest, LowersEveryThreadButTheKeptOnesAndWhatTheyStartInherits) {
  // In a child process: the nice values of this test binary stay as they are.
  EXPECT_EXIT(
      {
        ParkedThread kept("prio-keep");
        ParkedThread other("prio-other");
        const int before = NiceOf(ThisTid());
        // Linux caps nice values at 19 (a suite run under nice 17 or more).
        const int lowered_nice = std::min(before + 3, 19);
        absl::StatusOr<int> lowered = LowerOtherThreads(3, "prio-keep");
        if (!lowered.ok() || *lowered < 2) _exit(10);
        if (NiceOf(kept.tid()) != before) _exit(11);
        if (NiceOf(other.tid()) != lowered_nice) _exit(12);
        if (NiceOf(ThisTid()) != lowered_nice) _exit(13);
        // A thread started by a lowered one inherits its nice value.
        int inherited = -100;
        std::thread([&inherited] { inherited = NiceOf(ThisTid()); }).join();
        if (inherited != lowered_nice) _exit(14);
        _exit(0);
      },
      testing::ExitedWithCode(0), "");
}

TEST(ThreadPriorityTest, RefusesANiceValueOutOfRange) {
  EXPECT_EQ(LowerOtherThreads(0, "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LowerOtherThreads(20, "x").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace performer::server
