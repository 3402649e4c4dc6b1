#include "server/process/heap_release.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <vector>

namespace performer::server {
namespace {

TEST(HeapReleaseTriggerTest, ReleasesOnceFreeBytesGrowPastTheBurstThreshold) {
  // Levels that move by more than the settled tolerance (2) at every look.
  HeapReleaseTrigger trigger(/*burst_bytes=*/100, /*settled_bytes=*/8, /*free_bytes=*/50);
  EXPECT_FALSE(trigger.Due(80));
  EXPECT_FALSE(trigger.Due(150));
  EXPECT_TRUE(trigger.Due(151));
  trigger.Released(140);
  // Freed chunks stay free after a release: the same level is not due again.
  EXPECT_FALSE(trigger.Due(140));
  EXPECT_FALSE(trigger.Due(200));
  EXPECT_FALSE(trigger.Due(240));
  EXPECT_TRUE(trigger.Due(241));
}

TEST(HeapReleaseTriggerTest, CountsGrowthFromTheLowestLevelSinceTheLastRelease) {
  HeapReleaseTrigger trigger(/*burst_bytes=*/100, /*settled_bytes=*/8, /*free_bytes=*/500);
  EXPECT_FALSE(trigger.Due(20));  // the free chunks were used again
  EXPECT_FALSE(trigger.Due(70));
  EXPECT_FALSE(trigger.Due(120));
  EXPECT_TRUE(trigger.Due(121));
}

TEST(HeapReleaseTriggerTest, ReleasesASmallerGrowthOnceTheLevelStopsMoving) {
  HeapReleaseTrigger trigger(/*burst_bytes=*/100, /*settled_bytes=*/8, /*free_bytes=*/0);
  EXPECT_FALSE(trigger.Due(40));  // a burst's last frees: moved by 40
  EXPECT_TRUE(trigger.Due(42));   // over: moved by 2 (the tolerance), grown by 42
  trigger.Released(42);
  EXPECT_FALSE(trigger.Due(42));
  EXPECT_FALSE(trigger.Due(50));  // grown by 8: not more than settled_bytes
  EXPECT_FALSE(trigger.Due(50));
  EXPECT_TRUE(trigger.Due(51));  // grown by 9, moved by 1
}

TEST(HeapReleaseTriggerTest, ASettledGrowthNeedsTheLevelStillSinceThePreviousLook) {
  HeapReleaseTrigger trigger(/*burst_bytes=*/100, /*settled_bytes=*/8, /*free_bytes=*/0);
  EXPECT_FALSE(trigger.Due(9));  // grown by 9, moved by 9
  EXPECT_TRUE(trigger.Due(11));  // moved by 2: still
  trigger.Released(11);
  EXPECT_FALSE(trigger.Due(11));
  EXPECT_FALSE(trigger.Due(19));  // grown by 8
  EXPECT_FALSE(trigger.Due(25));  // grown by 14, moved by 6
  EXPECT_TRUE(trigger.Due(26));   // moved by 1
  // A level at work (up and down by more than the tolerance) waits for the
  // burst threshold.
  trigger.Released(26);
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(trigger.Due(26 + 60));
    EXPECT_FALSE(trigger.Due(26 + 30));
  }
}

// glibc's allocator; a sanitizer replaces it (and its statistics).
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PERFORMER_SANITIZED_HEAP 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define PERFORMER_SANITIZED_HEAP 1
#endif

#if defined(__GLIBC__) && !defined(PERFORMER_SANITIZED_HEAP)
// Resident bytes of this process.
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t size = 0;
  size_t resident = 0;
  statm >> size >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

TEST(ReleaseFreeHeapTest, ReturnsTheFreeChunksPagesToTheSystem) {
  // Blocks below the allocator's mmap threshold, every other one freed, so
  // the free ones cannot merge into the top of the heap and stay resident.
  constexpr size_t kBlock = 64 << 10;
  constexpr size_t kBlocks = 1024;
  std::vector<std::unique_ptr<char[]>> blocks;
  for (size_t i = 0; i < kBlocks; ++i) {
    blocks.emplace_back(new char[kBlock]);
    std::fill_n(blocks.back().get(), kBlock, static_cast<char>(i));
  }
  for (size_t i = 0; i < kBlocks; i += 2) blocks[i].reset();
  EXPECT_GE(FreeHeapBytes(), kBlocks / 2 * kBlock);
  const size_t resident = ResidentBytes();
  EXPECT_GE(ReleaseFreeHeap(), kBlocks / 2 * kBlock);
  EXPECT_LE(ResidentBytes() + kBlocks / 4 * kBlock, resident);
}
#endif

}  // namespace
}  // namespace performer::server
