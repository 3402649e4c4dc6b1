#include "tests/kernels/cuda/emulation/cuda_emulation.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace performer::cuda_emulation {
namespace {

// A barrier whose participants may leave (a thread that returns from the
// kernel). A wait that lasts a minute means some thread never reaches the
// barrier (a barrier in divergent code): the process aborts saying so.
class Barrier {
 public:
  void Reset(int participants) {
    std::lock_guard<std::mutex> lock(mutex_);
    expected_ = participants;
    arrived_ = 0;
  }
  void ArriveAndWait(const char* what) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ >= expected_) {
      Release();
      return;
    }
    if (!released_.wait_for(lock, std::chrono::seconds(60),
                            [&] { return generation_ != generation; })) {
      std::fprintf(stderr, "cuda emulation: %s waited 60 s: a thread never reached it\n", what);
      std::abort();
    }
  }
  void Leave() {
    std::lock_guard<std::mutex> lock(mutex_);
    --expected_;
    if (arrived_ > 0 && arrived_ >= expected_) Release();
  }

 private:
  void Release() {
    arrived_ = 0;
    ++generation_;
    released_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable released_;
  int expected_ = 0;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

struct Warp {
  Barrier barrier;
  uint64_t lanes[32] = {};
};

// What the threads of the running block share.
struct Block {
  Barrier barrier;
  std::vector<std::unique_ptr<Warp>> warps;
};

thread_local ThreadContext current{};
thread_local Block* current_block = nullptr;
thread_local cudaError_t last_error = cudaSuccess;

std::mutex limits_mutex;
std::map<const void*, int>& Limits() {
  static std::map<const void*, int> limits;
  return limits;
}

Warp& CurrentWarp() { return *current_block->warps[static_cast<size_t>(current.linear / 32)]; }

}  // namespace

void SetLastError(cudaError_t error) { last_error = error; }

cudaError_t TakeLastError() {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

void SetSharedLimit(const void* kernel, int bytes) {
  std::lock_guard<std::mutex> lock(limits_mutex);
  Limits()[kernel] = bytes;
}

int SharedLimit(const void* kernel) {
  std::lock_guard<std::mutex> lock(limits_mutex);
  const auto it = Limits().find(kernel);
  return it == Limits().end() ? kDefaultSharedBytes : it->second;
}

ThreadContext& Current() { return current; }

void SyncThreads() { current_block->barrier.ArriveAndWait("__syncthreads"); }

void SyncWarp() { CurrentWarp().barrier.ArriveAndWait("a warp barrier"); }

uint64_t ExchangeLane(uint64_t bits, int source_lane) {
  Warp& warp = CurrentWarp();
  warp.lanes[current.linear % 32] = bits;
  warp.barrier.ArriveAndWait("a warp shuffle");
  const uint64_t out = warp.lanes[source_lane];
  warp.barrier.ArriveAndWait("a warp shuffle");
  return out;
}

uint32_t BallotLanes(bool predicate) {
  Warp& warp = CurrentWarp();
  warp.lanes[current.linear % 32] = predicate ? 1 : 0;
  warp.barrier.ArriveAndWait("a warp ballot");
  uint32_t mask = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if (warp.lanes[lane] != 0) mask |= 1u << lane;
  }
  warp.barrier.ArriveAndWait("a warp ballot");
  return mask;
}

void RunGrid(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
             const std::function<void()>& body) {
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  const bool bad_block = threads == 0 || threads > 1024 || block.z > 64;
  const bool bad_grid = grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu ||
                        grid.y > 65535 || grid.z > 65535;
  if (bad_block || bad_grid) {
    SetLastError(cudaErrorInvalidConfiguration);
    return;
  }
  if (shared_bytes > static_cast<size_t>(SharedLimit(kernel))) {
    SetLastError(cudaErrorInvalidValue);
    return;
  }
  const int count = static_cast<int>(threads);
  const int warps = (count + 31) / 32;
  Block state;
  for (int w = 0; w < warps; ++w) state.warps.push_back(std::make_unique<Warp>());
  std::vector<unsigned char> shared(shared_bytes + 16);
  // 16-byte aligned, as the device's dynamic shared memory.
  unsigned char* base = shared.data() + (16 - reinterpret_cast<uintptr_t>(shared.data()) % 16) % 16;
  Barrier start, end;
  start.Reset(count);
  end.Reset(count);
  const uint64_t blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  auto worker = [&](int linear) {
    current_block = &state;
    current.linear = linear;
    current.block_dim = block;
    current.grid_dim = grid;
    current.shared = base;
    current.thread = {static_cast<unsigned>(linear) % block.x,
                      static_cast<unsigned>(linear) / block.x % block.y,
                      static_cast<unsigned>(linear) / (block.x * block.y)};
    for (uint64_t b = 0; b < blocks; ++b) {
      if (linear == 0) {
        state.barrier.Reset(count);
        for (int w = 0; w < warps; ++w) state.warps[w]->barrier.Reset(std::min(32, count - 32 * w));
        std::memset(base, 0xff, shared_bytes);
      }
      start.ArriveAndWait("the start of a block");
      current.block = {static_cast<unsigned>(b % grid.x),
                       static_cast<unsigned>(b / grid.x % grid.y),
                       static_cast<unsigned>(b / (static_cast<uint64_t>(grid.x) * grid.y))};
      body();
      // Returned: no longer waited for at the block's or the warp's barriers.
      state.barrier.Leave();
      CurrentWarp().barrier.Leave();
      end.ArriveAndWait("the end of a block");
    }
    current_block = nullptr;
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(count));
  for (int t = 0; t < count; ++t) pool.emplace_back(worker, t);
  for (std::thread& t : pool) t.join();
}

}  // namespace performer::cuda_emulation

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
  }
  return "unknown error";
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  namespace emu = performer::cuda_emulation;
  if (device != 0) return cudaErrorInvalidValue;
  switch (attribute) {
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = emu::kDefaultSharedBytes;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount:
      *value = emu::kSmCount;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 8;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = emu::kSharedBytesPerSm;
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = emu::kOptinSharedBytes;
      return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

void __trap() {
  std::fprintf(stderr, "cuda emulation: __trap()\n");
  std::abort();
}
