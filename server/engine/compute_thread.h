// The one thread of the process that runs model work (loading, warm-up,
// prefill, decode steps, sampling, embeddings), whatever thread asks for it.
//
// Why one: LibTorch's CPU kernels run in OpenMP parallel regions, and
// libgomp gives every thread that starts a region a team of its own. Once
// the process holds more OpenMP threads than CPUs, libgomp cuts the time an
// idle team thread spins before it sleeps to a few hundred iterations, and
// each of the ~60 regions of a decode step then pays a futex wake-up: on 2
// cores a batch-1 step of the bench model went from 3.1 ms to 5.6 ms as soon
// as a second thread had run a region (docs/benchmarks.md). A thread per
// engine (or loading on the main thread and decoding on an engine's) is
// exactly that. With every model call on this thread there is one team,
// and models hosted side by side take turns instead of oversubscribing the
// cores.
#pragma once

#include <functional>
#include <future>
#include <thread>
#include <type_traits>
#include <utility>

#include "server/engine/work_queue.h"

namespace performer::server {

// The compute thread's name; the OpenMP team it starts inherits it.
inline constexpr char kComputeThreadName[] = "compute";

class ComputeThread {
 public:
  // The process's compute thread, started on first use. It lives until the
  // process exits (it is never joined: engines may still hand it work from
  // static destructors' time).
  static ComputeThread& Get();

  // True while work from other threads waits for this thread: a caller
  // that runs a loop on it (an engine's iterations) yields between rounds.
  bool HasWaitingWork();

  // Runs fn() on the compute thread and returns its result; an exception it
  // throws is rethrown here. Called on the compute thread itself, runs fn()
  // at once. Calls from several threads run one at a time, in arrival order.
  template <typename Fn>
  std::invoke_result_t<Fn> Run(Fn&& fn) {
    if (std::this_thread::get_id() == id_) return std::forward<Fn>(fn)();
    std::packaged_task<std::invoke_result_t<Fn>()> task(std::forward<Fn>(fn));
    auto result = task.get_future();
    Post([&task] { task(); });
    return result.get();
  }

 private:
  ComputeThread();
  void Post(std::function<void()> work);
  void Loop();

  WorkQueue queue_;
  std::thread thread_;
  std::thread::id id_;
};

// ComputeThread::Get().Run(fn).
template <typename Fn>
std::invoke_result_t<Fn> RunOnComputeThread(Fn&& fn) {
  return ComputeThread::Get().Run(std::forward<Fn>(fn));
}

}  // namespace performer::server
