#include "server/service/write_threads.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include "server/engine/thread_name.h"

namespace performer::server {

WriteThreads& WriteThreads::Get() {
  static WriteThreads* const pool =
      new WriteThreads(std::clamp(static_cast<int>(std::thread::hardware_concurrency()) / 4, 1, 4));
  return *pool;
}

WriteThreads::WriteThreads(int threads) : threads_(threads) {
  for (int i = 0; i < threads; ++i) {
    std::thread([this, i] {
      NameThisThread("write-" + std::to_string(i));
      Loop();
    }).detach();
  }
}

void WriteThreads::Post(std::function<void()> task) { queue_.Post(std::move(task)); }

void WriteThreads::Loop() {
  while (true) queue_.Take()();
}

}  // namespace performer::server
