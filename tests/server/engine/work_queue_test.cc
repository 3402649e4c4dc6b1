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

TEST(WorkQueueTest, APostWakesTheTakerAtOnce) {
  WorkQueue queue;
  Taker taker(queue);
  taker.WaitUntilIdle();
  queue.Post([] {});
  taker.WaitForRuns(1);
  EXPECT_EQ(taker.ran(), 1);
}

TEST(WorkQueueTest, PostsInADeferredScopeWakeTheTakerOnlyWhenItEnds) {
  WorkQueue queue;
  Taker taker(queue);
  taker.WaitUntilIdle();
  {
    const WorkQueue::DeferredWakeups scope;
    for (int i = 0; i < 3; ++i) queue.Post([] {});
    EXPECT_FALSE(queue.empty());
    // The taker sleeps on: nothing has woken it.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(taker.ran(), 0);
    EXPECT_EQ(queue.waiting(), 1);
  }
  taker.WaitForRuns(3);
  EXPECT_EQ(taker.ran(), 3);
}

TEST(WorkQueueTest, OnlyTheOutermostScopeWakes) {
  WorkQueue queue;
  Taker taker(queue);
  taker.WaitUntilIdle();
  {
    const WorkQueue::DeferredWakeups outer;
    {
      const WorkQueue::DeferredWakeups inner;
      queue.Post([] {});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(taker.ran(), 0);
  }
  taker.WaitForRuns(1);
}

TEST(WorkQueueTest, AScopeDefersOnlyItsOwnThreadsPosts) {
  WorkQueue queue;
  Taker taker(queue);
  taker.WaitUntilIdle();
  const WorkQueue::DeferredWakeups scope;
  std::thread([&queue] { queue.Post([] {}); }).join();
  taker.WaitForRuns(1);
  EXPECT_EQ(taker.ran(), 1);
}

}  // namespace
}  // namespace performer::server
