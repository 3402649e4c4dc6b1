#include "server/engine/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace performer::server {
namespace {

// One taker running every task of `queue` until it takes a null one.
class Taker {
 public:
  explicit Taker(WorkQueue& queue) : queue_(queue), thread_([this] { Loop(); }) {}
  ~Taker() {
    queue_.Post(nullptr);
    thread_.join();
  }

  // Until the taker is blocked in Take() with nothing queued, so that only
  // a wake-up can make it run the next task.
  void WaitUntilIdle() const {
    while (queue_.waiting() != 1 || !queue_.empty()) std::this_thread::yield();
  }

  int ran() const { return ran_.load(); }

  // Nothing has woken the taker: it has run no task and still waits.
  void ExpectStillAsleep() const {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(ran(), 0);
    EXPECT_EQ(queue_.waiting(), 1);
  }

  void WaitForRuns(int runs) const {
    while (ran_.load() < runs) std::this_thread::yield();
  }

 private:
  void Loop() {
    while (true) {
      std::function<void()> task = queue_.Take();
      if (!task) return;
      task();
      ran_.fetch_add(1);
    }
  }

  WorkQueue& queue_;
  std::atomic<int> ran_{0};
  std::thread thread_;
};

// A queue whose one taker waits idle when each test begins.
class WorkQueueTest : public ::testing::Test {
 protected:
  void SetUp() override { taker.WaitUntilIdle(); }

  WorkQueue queue;
  Taker taker{queue};
};

TEST_F(WorkQueueTest, APostWakesTheTakerAtOnce) {
  queue.Post([] {});
  taker.WaitForRuns(1);
  EXPECT_EQ(taker.ran(), 1);
}

TEST_F(WorkQueueTest, PostsInADeferredScopeWakeTheTakerOnlyWhenItEnds) {
  {
    const WorkQueue::DeferredWakeups scope;
    for (int i = 0; i < 3; ++i) queue.Post([] {});
    EXPECT_FALSE(queue.empty());
    taker.ExpectStillAsleep();
  }
  taker.WaitForRuns(3);
  EXPECT_EQ(taker.ran(), 3);
}

TEST_F(WorkQueueTest, OnlyTheOutermostScopeWakes) {
  {
    const WorkQueue::DeferredWakeups outer;
    {
      const WorkQueue::DeferredWakeups inner;
      queue.Post([] {});
    }
    taker.ExpectStillAsleep();
  }
  taker.WaitForRuns(1);
}

TEST_F(WorkQueueTest, AScopeDefersOnlyItsOwnThreadsPosts) {
  const WorkQueue::DeferredWakeups scope;
  std::thread([this] { queue.Post([] {}); }).join();
  taker.WaitForRuns(1);
  EXPECT_EQ(taker.ran(), 1);
}

}  // namespace
}  // namespace performer::server
