#include "server/process/heap_release.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace performer::server {

size_t FreeHeapBytes() {
#if defined(__GLIBC__)
  return mallinfo2().fordblks;
#else
  return 0;
#endif
}

size_t ReleaseFreeHeap() {
  const size_t free_bytes = FreeHeapBytes();
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
  return free_bytes;
}

bool HeapReleaseTrigger::Due(size_t free_bytes) {
  if (free_bytes < baseline_) baseline_ = free_bytes;
  const size_t moved = free_bytes > previous_ ? free_bytes - previous_ : previous_ - free_bytes;
  previous_ = free_bytes;
  const size_t growth = free_bytes - baseline_;
  return growth > burst_bytes_ || (growth > settled_bytes_ && moved <= settled_bytes_ / 4);
}

HeapReleaser::HeapReleaser(size_t burst_bytes, size_t settled_bytes, absl::Duration period)
    : trigger_(burst_bytes, settled_bytes, FreeHeapBytes()),
      period_(period),
      thread_([this] { Watch(); }) {}

HeapReleaser::~HeapReleaser() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void HeapReleaser::Watch() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(&stop_), period_)) {
    if (trigger_.Due(FreeHeapBytes())) {
      ReleaseFreeHeap();
      trigger_.Released(FreeHeapBytes());
    }
  }
}

}  // namespace performer::server
