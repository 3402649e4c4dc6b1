// The process's threads that hand the engine's output to the RPCs: a
// stream's listener posts its reactor's pump here instead of running it on
// the thread that appended, which is the compute thread. A gRPC write runs
// on the thread that starts it (serialization, HTTP/2 framing, the socket's
// send and, over loopback, the receiver's network stack): about 0.16 ms per
// message on the 2-core bench machine, 5 ms of a 20 ms step at 32 streams.
// On a GPU the compute thread's time is the device's, and hundreds of
// streams' writes would outlast the step; here they overlap the next step,
// and a stream whose tokens arrive while its pump waits gets them in one
// message. (Where the step's threads use every core the writes cost the
// same CPU time either way: docs/benchmarks.md.)
#pragma once

#include <functional>

#include "server/engine/work_queue.h"

namespace performer::server {

class WriteThreads {
 public:
  // The process's pool, started on first use: a quarter of the CPUs, at
  // least 1 and at most 4 threads. Leaked on purpose, like the compute
  // thread (server/engine/compute_thread.h): reactors may post to it until
  // the process exits.
  static WriteThreads& Get();

  // Runs `task` on one of the threads, in posting order per thread. A task
  // must not block.
  void Post(std::function<void()> task);

  int threads() const { return threads_; }

 private:
  explicit WriteThreads(int threads);
  void Loop();

  WorkQueue queue_;
  const int threads_;
};

}  // namespace performer::server
