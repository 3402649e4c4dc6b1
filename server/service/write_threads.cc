#include "server/service/write_threads.h"

#include <algorithm>
#include <utility>

namespace performer::server {

WriteThreads& WriteThreads::Get() {
  static WriteThreads* const pool =
      new WriteThreads(std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4));
  return *pool;
}

WriteThreads::WriteThreads(int threads) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this] { Loop(); });
    threads_.back().detach();
  }
}

void WriteThreads::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
}

void WriteThreads::Loop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return !queue_.empty(); });
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace performer::server
