#include "server/engine/compute_thread.h"

namespace performer::server {

ComputeThread& ComputeThread::Get() {
  // Leaked on purpose: see the header.
  static ComputeThread* const compute = new ComputeThread();
  return *compute;
}

ComputeThread::ComputeThread() {
  std::promise<std::thread::id> started;
  std::future<std::thread::id> id = started.get_future();
  thread_ = std::thread([this, &started] {
    started.set_value(std::this_thread::get_id());
    Loop();
  });
  id_ = id.get();
  thread_.detach();
}

bool ComputeThread::HasWaitingWork() {
  std::lock_guard<std::mutex> lock(mu_);
  return !queue_.empty();
}

void ComputeThread::Post(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  wake_.notify_one();
}

void ComputeThread::Loop() {
  while (true) {
    std::function<void()> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return !queue_.empty(); });
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
  }
}

}  // namespace performer::server
