#include "bench/memory_tracker.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace performer::bench {
namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};

void RaisePeak(int64_t live) {
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
}

// Wraps the default CPU allocator. Each pointer handed out is its own context
// (as with the default allocator), so raw_allocate / raw_deallocate keep
// working; the size and the wrapped allocation's own context and deleter are
// kept in a table keyed by the pointer.
class TrackingCpuAllocator final : public c10::Allocator {
 public:
  explicit TrackingCpuAllocator(c10::Allocator* base) : base_(base) {}

  // LibTorch 1.x/2.0-2.2 declare allocate() const, later versions non-const:
  // defining both keeps one of them the override on every version.
  c10::DataPtr allocate(size_t bytes) const { return Allocate(bytes); }
  c10::DataPtr allocate(size_t bytes) { return Allocate(bytes); }

  c10::DeleterFnPtr raw_deleter() const override { return &Free; }

  // Pure virtual in recent LibTorch versions; a plain member before.
  void copy_data(void* dest, const void* src, std::size_t count) const {
    std::memcpy(dest, src, count);
  }

 private:
  struct Entry {
    size_t bytes;
    c10::DataPtr base;
  };

  c10::DataPtr Allocate(size_t bytes) const {
    c10::DataPtr base = base_->allocate(bytes);
    void* data = base.get();
    if (data == nullptr) return base;
    const c10::Device device = base.device();
    {
      std::lock_guard<std::mutex> lock(Mutex());
      Table().emplace(data, Entry{bytes, std::move(base)});
    }
    RaisePeak(g_live_bytes.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes));
    return c10::DataPtr(data, data, &Free, device);
  }

  static void Free(void* data) {
    Entry entry{0, c10::DataPtr()};
    {
      std::lock_guard<std::mutex> lock(Mutex());
      auto it = Table().find(data);
      if (it == Table().end()) return;
      entry = std::move(it->second);
      Table().erase(it);
    }
    g_live_bytes.fetch_sub(static_cast<int64_t>(entry.bytes));
    // entry.base frees the memory with the wrapped allocator's deleter here.
  }

  static std::mutex& Mutex() {
    static std::mutex* mutex = new std::mutex();
    return *mutex;
  }
  static std::unordered_map<void*, Entry>& Table() {
    static auto* table = new std::unordered_map<void*, Entry>();
    return *table;
  }

  c10::Allocator* base_;
};

}  // namespace

CpuMemoryTracker& CpuMemoryTracker::Install() {
  static CpuMemoryTracker* tracker = [] {
    // Never destroyed: tensors may outlive main().
    static auto* allocator = new TrackingCpuAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(allocator, /*priority=*/UINT8_MAX);
    return new CpuMemoryTracker();
  }();
  return *tracker;
}

int64_t CpuMemoryTracker::live_bytes() const { return g_live_bytes.load(); }

int64_t CpuMemoryTracker::peak_bytes() const { return g_peak_bytes.load(); }

void CpuMemoryTracker::ResetPeak() { g_peak_bytes.store(g_live_bytes.load()); }

PeakMemoryScope::PeakMemoryScope()
    : tracker_(CpuMemoryTracker::Install()), start_bytes_(tracker_.live_bytes()) {
  tracker_.ResetPeak();
}

int64_t PeakMemoryScope::PeakAboveStart() const { return tracker_.peak_bytes() - start_bytes_; }

}  // namespace performer::bench
