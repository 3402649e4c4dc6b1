// Peak-memory accounting for CPU tensors, for benchmarks.
//
// CpuMemoryTracker::Install() wraps the allocator LibTorch uses for CPU
// tensors (c10::GetDefaultCPUAllocator(), installed with c10::SetCPUAllocator)
// in one that counts the bytes currently allocated through it and the peak
// since the last ResetPeak(). Only allocations made after Install() are
// counted (earlier ones are freed with their own deleter, uncounted).
// Install before creating the tensors of interest, typically at the top of
// main(); it is idempotent. Thread-safe.
//
//   PeakMemoryScope scope;          // installs if needed, resets the peak
//   run_one_call();
//   int64_t extra = scope.PeakAboveStart();  // peak bytes above those live at start
#pragma once

#include <cstdint>

namespace performer::bench {

class CpuMemoryTracker {
 public:
  // Installs the tracking allocator once and returns the process-wide tracker.
  static CpuMemoryTracker& Install();

  // Bytes allocated through the tracker and not yet freed.
  int64_t live_bytes() const;
  // The largest live_bytes() since the last ResetPeak() (or Install()).
  int64_t peak_bytes() const;
  // Sets the peak to the current live bytes.
  void ResetPeak();

 private:
  CpuMemoryTracker() = default;
};

// Measures the peak CPU tensor memory of the code run during its lifetime.
class PeakMemoryScope {
 public:
  PeakMemoryScope();
  // Peak bytes live at any moment since construction minus those live at
  // construction: the extra memory the code needed, outputs included.
  int64_t PeakAboveStart() const;

 private:
  CpuMemoryTracker& tracker_;
  int64_t start_bytes_;
};

}  // namespace performer::bench
