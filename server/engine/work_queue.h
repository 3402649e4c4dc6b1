// Tasks handed to long-lived threads (the compute thread, the write
// threads), taken in arrival order. Thread-safe.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

namespace performer::server {

class WorkQueue {
 public:
  void Post(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
  }

  // The oldest task, waiting for one if there is none.
  std::function<void()> Take() {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [&] { return !tasks_.empty(); });
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    return task;
  }

  bool empty() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tasks_.empty();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
};

}  // namespace performer::server
