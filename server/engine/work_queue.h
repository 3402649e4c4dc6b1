// Tasks handed to long-lived threads (the compute thread, the write
// threads), taken in arrival order. Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace performer::server {

class WorkQueue {
 public:
  // While one lives on a thread, that thread's Posts queue their tasks at
  // once but wake the queues' takers only when the outermost one ends. A
  // producer that posts a burst (the engine handing a step's tokens to
  // hundreds of streams, each a task for the write threads) then wakes the
  // takers once per burst instead of once per task: a wake-up is a system
  // call, and a woken taker on the producer's CPU preempts it to run one
  // task at a time. A task posted inside the scope must not be waited for
  // inside it (nothing wakes its taker until the scope ends). Queues must
  // outlive the scope (the process's queues are never destroyed).
  class DeferredWakeups {
   public:
    DeferredWakeups() : outer_(current_) { current_ = this; }
    ~DeferredWakeups() {
      current_ = outer_;
      for (WorkQueue* queue : posted_) {
        if (outer_ != nullptr) {
          outer_->Note(queue);
        } else {
          queue->ready_.SignalAll();
        }
      }
    }
    DeferredWakeups(const DeferredWakeups&) = delete;
    DeferredWakeups& operator=(const DeferredWakeups&) = delete;

   private:
    friend class WorkQueue;
    void Note(WorkQueue* queue) {
      for (WorkQueue* q : posted_) {
        if (q == queue) return;
      }
      posted_.push_back(queue);
    }

    DeferredWakeups* const outer_;
    std::vector<WorkQueue*> posted_;  // a burst posts to one or two queues
  };

  void Post(std::function<void()> task) {
    {
      absl::MutexLock lock(&mu_);
      tasks_.push_back(std::move(task));
    }
    if (current_ != nullptr) {
      current_->Note(this);
    } else {
      ready_.Signal();
    }
  }

  // The oldest task, waiting for one if there is none.
  std::function<void()> Take() {
    absl::MutexLock lock(&mu_);
    ++waiting_;
    while (tasks_.empty()) ready_.Wait(&mu_);
    --waiting_;
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    return task;
  }

  bool empty() const {
    absl::MutexLock lock(&mu_);
    return tasks_.empty();
  }

  // Takers inside Take() now (blocked, or about to return a task).
  int waiting() const {
    absl::MutexLock lock(&mu_);
    return waiting_;
  }

 private:
  inline static thread_local DeferredWakeups* current_ = nullptr;

  mutable absl::Mutex mu_;
  absl::CondVar ready_;  // signalled after a Post, outside the lock
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace performer::server
