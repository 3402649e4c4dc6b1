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

void WriteThreads::Post(std::function<void()> task) { queue_.Post(std::move(task)); }

void WriteThreads::Loop() {
  while (true) queue_.Take()();
}

}  // namespace performer::server
