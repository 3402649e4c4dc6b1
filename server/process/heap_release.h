// Returns freed heap memory to the system.
//
// glibc keeps what is freed inside its arenas, and after a burst of small
// allocations that ended (an HTTP/2 flood: tens of thousands of streams
// reset at once, each a gRPC call of about 19 KB alive until gRPC has
// processed its reset, or a header block that never ends) gigabytes stay
// resident though a few percent of them are in use; malloc_trim gives them
// back. A thread looks once per `period` and trims when the free bytes
// inside the arenas have grown by more than a large threshold (a burst still
// going), or by more than a small one once they have stopped moving (a burst
// over, its last frees done). A server at work frees and reuses far less
// than the large threshold and moves more than the small one's tolerance
// between looks, so it is rarely trimmed (a trimmed page costs a fault when
// it is used again).
#pragma once

#include <cstddef>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace performer::server {

// Free bytes inside the allocator's arenas (glibc's mallinfo2 fordblks); 0
// where the C library is not glibc.
size_t FreeHeapBytes();

// Trims the heap; the free bytes it held before. Nothing where not glibc.
size_t ReleaseFreeHeap();

// When to release. Growth counts from the free bytes after the last release
// (or their lowest point since): freed chunks stay free after a release
// (their pages go, not the chunks), so a level alone would release again
// every time it is looked at. Due when the growth exceeds `burst_bytes`, or
// exceeds `settled_bytes` while the level has moved by at most a quarter of
// `settled_bytes` since the previous look.
class HeapReleaseTrigger {
 public:
  HeapReleaseTrigger(size_t burst_bytes, size_t settled_bytes, size_t free_bytes)
      : burst_bytes_(burst_bytes),
        settled_bytes_(settled_bytes),
        baseline_(free_bytes),
        previous_(free_bytes) {}
  // Whether to release now, with `free_bytes` free.
  bool Due(size_t free_bytes);
  // A release left `free_bytes` free.
  void Released(size_t free_bytes) { baseline_ = previous_ = free_bytes; }

 private:
  const size_t burst_bytes_;
  const size_t settled_bytes_;
  size_t baseline_;
  size_t previous_;  // at the last look
};

// Looks every `period` and releases when the trigger says so. Watches from
// construction to destruction.
class HeapReleaser {
 public:
  HeapReleaser(size_t burst_bytes, size_t settled_bytes, absl::Duration period);
  ~HeapReleaser();
  HeapReleaser(const HeapReleaser&) = delete;
  HeapReleaser& operator=(const HeapReleaser&) = delete;

 private:
  void Watch();

  HeapReleaseTrigger trigger_;  // the thread's alone
  const absl::Duration period_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the rest is set
};

}  // namespace performer::server
