#include "tests/kernels/cuda/emulation/cuda_emulation.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace performer::cuda_emulation {
namespace {

// A fiber's stack. Kernels keep little on theirs; address sanitizer's
// frames are larger.
constexpr size_t kStackBytes = size_t{128} * 1024;

enum class Wait { kNone, kBlock, kWarp, kCluster, kDone };

struct Fiber {
  ucontext_t context;
  char* stack;
  ThreadContext thread;
  int rank;  // its block's rank in the cluster
  int warp;  // within its block
  Wait wait;
  void* fake_stack;  // address sanitizer's, across switches
};

// What the fibers of the running blocks share.
struct Round {
  std::vector<Fiber> fibers;
  std::vector<unsigned char*> bases;  // shared memory by rank
  int threads = 0;                    // per block
  int warps = 0;                      // per block
  std::vector<uint64_t> lanes;        // warp exchange slots: (rank, warp, lane)
  const std::function<void()>* body = nullptr;
  ucontext_t scheduler;
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
};

thread_local Round* round_now = nullptr;
thread_local Fiber* fiber_now = nullptr;
thread_local cudaError_t last_error = cudaSuccess;

std::mutex limits_mutex;
std::map<const void*, int>& Limits() {
  static std::map<const void*, int> limits;
  return limits;
}

// Address sanitizer follows the switches between stacks (without it,
// nothing).
void StartSwitch(void** fake_stack, const void* bottom, size_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, bytes);
#else
  (void)fake_stack, (void)bottom, (void)bytes;
#endif
}
void FinishSwitch(void* fake_stack, const void** bottom, size_t* bytes) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom, bytes);
#else
  (void)fake_stack, (void)bottom, (void)bytes;
#endif
}

// Runs on the fiber's stack; returning resumes the scheduler (uc_link).
void FiberMain() {
  Round& round = *round_now;
  FinishSwitch(nullptr, &round.scheduler_stack, &round.scheduler_stack_bytes);
  (*round.body)();
  fiber_now->wait = Wait::kDone;
  StartSwitch(nullptr, round.scheduler_stack, round.scheduler_stack_bytes);
}

// The running fiber waits at `wait` until the scheduler lets it on.
void Block(Wait wait) {
  Round& round = *round_now;
  Fiber& fiber = *fiber_now;
  fiber.wait = wait;
  StartSwitch(&fiber.fake_stack, round.scheduler_stack, round.scheduler_stack_bytes);
  swapcontext(&fiber.context, &round.scheduler);
  FinishSwitch(fiber.fake_stack, &round.scheduler_stack, &round.scheduler_stack_bytes);
}

const char* WaitName(Wait wait) {
  switch (wait) {
    case Wait::kNone:
      return "running";
    case Wait::kBlock:
      return "__syncthreads";
    case Wait::kWarp:
      return "a warp barrier";
    case Wait::kCluster:
      return "a cluster's sync";
    case Wait::kDone:
      return "returned";
  }
  return "?";
}

// Lets on the fibers of one barrier that every live thread of its group
// has reached, the innermost group first; false when none can go on.
bool Release(Round& round) {
  std::vector<Fiber>& fibers = round.fibers;
  const int ranks = static_cast<int>(round.bases.size());
  auto release = [&](auto in_group, Wait wait) {
    int live = 0, waiting = 0;
    for (Fiber& f : fibers) {
      if (!in_group(f) || f.wait == Wait::kDone) continue;
      ++live;
      if (f.wait == wait) ++waiting;
    }
    if (live == 0 || waiting != live) return false;
    for (Fiber& f : fibers) {
      if (in_group(f) && f.wait == wait) f.wait = Wait::kNone;
    }
    return true;
  };
  bool any = false;
  for (int r = 0; r < ranks; ++r) {
    for (int w = 0; w < round.warps; ++w) {
      any |= release([&](const Fiber& f) { return f.rank == r && f.warp == w; }, Wait::kWarp);
    }
  }
  if (any) return true;
  for (int r = 0; r < ranks; ++r) {
    any |= release([&](const Fiber& f) { return f.rank == r; }, Wait::kBlock);
  }
  if (any) return true;
  return release([](const Fiber&) { return true; }, Wait::kCluster);
}

[[noreturn]] void Deadlock(const Round& round) {
  std::fprintf(stderr, "cuda emulation: the threads wait at barriers that cannot all be met:\n");
  for (const Fiber& f : round.fibers) {
    if (f.wait == Wait::kDone) continue;
    std::fprintf(stderr, "  block rank %d thread %d: %s\n", f.rank, f.thread.linear,
                 WaitName(f.wait));
  }
  std::abort();
}

// Runs the fibers of one round (a block, or a cluster's blocks) until all
// have returned.
void RunRound(Round& round) {
  for (Fiber& f : round.fibers) {
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &round.scheduler;
    makecontext(&f.context, FiberMain, 0);
    f.wait = Wait::kNone;
    f.fake_stack = nullptr;
  }
  for (;;) {
    bool ran = false;
    for (Fiber& f : round.fibers) {
      if (f.wait != Wait::kNone) continue;
      fiber_now = &f;
      void* fake_stack = nullptr;
      StartSwitch(&fake_stack, f.stack, kStackBytes);
      swapcontext(&round.scheduler, &f.context);
      FinishSwitch(fake_stack, nullptr, nullptr);
      ran = true;
    }
    if (ran) continue;
    bool all_done = true;
    for (const Fiber& f : round.fibers) all_done &= f.wait == Wait::kDone;
    if (all_done) return;
    if (!Release(round)) Deadlock(round);
  }
}

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

ThreadContext& Current() { return fiber_now->thread; }

void SyncThreads() { Block(Wait::kBlock); }

void SyncWarp() { Block(Wait::kWarp); }

void SyncCluster() { Block(Wait::kCluster); }

unsigned ClusterSize() { return static_cast<unsigned>(round_now->bases.size()); }

void* MapSharedRank(void* address, unsigned rank) {
  const auto offset = static_cast<unsigned char*>(address) - fiber_now->thread.shared;
  return round_now->bases.at(rank) + offset;
}

namespace {

uint64_t& LaneSlot(int lane) {
  const Fiber& f = *fiber_now;
  const Round& round = *round_now;
  const size_t warp = static_cast<size_t>(f.rank) * round.warps + f.warp;
  return round_now->lanes[warp * 32 + static_cast<size_t>(lane)];
}

}  // namespace

uint64_t ExchangeLane(uint64_t bits, int source_lane) {
  LaneSlot(fiber_now->thread.linear % 32) = bits;
  SyncWarp();
  const uint64_t out = LaneSlot(source_lane);
  SyncWarp();
  return out;
}

uint32_t BallotLanes(bool predicate) {
  LaneSlot(fiber_now->thread.linear % 32) = predicate ? 1 : 0;
  SyncWarp();
  uint32_t mask = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if (LaneSlot(lane) != 0) mask |= 1u << lane;
  }
  SyncWarp();
  return mask;
}

void RunGrid(const void* kernel, dim3 grid, dim3 block, dim3 cluster, size_t shared_bytes,
             const std::function<void()>& body) {
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  const bool bad_block = threads == 0 || threads > 1024 || block.z > 64;
  const bool bad_grid = grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu ||
                        grid.y > 65535 || grid.z > 65535;
  // Clusters of up to 8 blocks along x that divide the grid (sm_90's
  // portable size).
  const bool bad_cluster =
      cluster.y != 1 || cluster.z != 1 || cluster.x < 1 || cluster.x > 8 || grid.x % cluster.x != 0;
  if (bad_block || bad_grid || bad_cluster) {
    SetLastError(cudaErrorInvalidConfiguration);
    return;
  }
  if (shared_bytes > static_cast<size_t>(SharedLimit(kernel))) {
    SetLastError(cudaErrorInvalidValue);
    return;
  }
  if (round_now != nullptr) {
    std::fprintf(stderr, "cuda emulation: a launch from inside a kernel\n");
    std::abort();
  }
  Round round;
  round.threads = static_cast<int>(threads);
  round.warps = (round.threads + 31) / 32;
  round.body = &body;
  const int ranks = static_cast<int>(cluster.x);
  // Shared memory per rank, 128-byte aligned (kernels may declare theirs
  // __align__(128); the device's is at least that aligned).
  constexpr size_t kAlign = 128;
  const size_t stride = (shared_bytes + kAlign - 1) / kAlign * kAlign;
  std::vector<unsigned char> shared(stride * static_cast<size_t>(ranks) + kAlign);
  unsigned char* first_base =
      shared.data() + (kAlign - reinterpret_cast<uintptr_t>(shared.data()) % kAlign) % kAlign;
  for (int r = 0; r < ranks; ++r) round.bases.push_back(first_base + stride * r);
  round.lanes.assign(static_cast<size_t>(ranks) * round.warps * 32, 0);
  const size_t fibers = static_cast<size_t>(ranks) * threads;
  // Stacks from one mapping, committed only where the fibers touch them.
  const size_t stack_bytes = fibers * kStackBytes;
  void* stacks = mmap(nullptr, stack_bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (stacks == MAP_FAILED) {
    std::fprintf(stderr, "cuda emulation: no memory for %zu fiber stacks\n", fibers);
    std::abort();
  }
  round.fibers.resize(fibers);
  for (size_t i = 0; i < fibers; ++i) {
    Fiber& f = round.fibers[i];
    const int rank = static_cast<int>(i / threads), linear = static_cast<int>(i % threads);
    f.stack = static_cast<char*>(stacks) + i * kStackBytes;
    f.rank = rank;
    f.warp = linear / 32;
    f.thread.linear = linear;
    f.thread.cluster_rank = rank;
    f.thread.block_dim = block;
    f.thread.grid_dim = grid;
    f.thread.shared = round.bases[static_cast<size_t>(rank)];
    f.thread.thread = {static_cast<unsigned>(linear) % block.x,
                       static_cast<unsigned>(linear) / block.x % block.y,
                       static_cast<unsigned>(linear) / (block.x * block.y)};
  }
  round_now = &round;
  const uint64_t blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  for (uint64_t first = 0; first < blocks; first += static_cast<uint64_t>(ranks)) {
    for (unsigned char* base : round.bases) std::memset(base, 0xff, shared_bytes);
    for (Fiber& f : round.fibers) {
      const uint64_t b = first + static_cast<uint64_t>(f.rank);
      f.thread.block = {static_cast<unsigned>(b % grid.x),
                        static_cast<unsigned>(b / grid.x % grid.y),
                        static_cast<unsigned>(b / (static_cast<uint64_t>(grid.x) * grid.y))};
    }
    RunRound(round);
  }
  round_now = nullptr;
  fiber_now = nullptr;
  munmap(stacks, stack_bytes);
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
    case cudaDevAttrMultiProcessorCount:
      *value = emu::kSmCount;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
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
