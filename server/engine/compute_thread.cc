#include "server/engine/compute_thread.h"

#include "server/engine/thread_name.h"

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
    NameThisThread(kComputeThreadName);
    started.set_value(std::this_thread::get_id());
    Loop();
  });
  id_ = id.get();
  thread_.detach();
}

bool ComputeThread::HasWaitingWork() { return !queue_.empty(); }

void ComputeThread::Post(std::function<void()> work) { queue_.Post(std::move(work)); }

void ComputeThread::Loop() {
  while (true) queue_.Take()();
}

}  // namespace performer::server
