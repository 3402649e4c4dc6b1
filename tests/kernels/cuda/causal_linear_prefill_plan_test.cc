// The prefill kernel's schedule (kernels/cuda/causal_linear_prefill_plan.h),
// checked on the host against an H100-like device model: segments cover
// every chunk with none empty, tiles cover every column, shared memory fits,
// and a split never spills into a second wave of blocks. Runs everywhere (no
// GPU needed).
#include "kernels/cuda/causal_linear_prefill_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace performer::kernels::cuda {
namespace {

// An H100 SXM: 132 SMs, 227 KB of shared memory per block (opt-in), 228 KB
// per SM with 1 KB reserved per resident block, 2048 threads per SM (8
// blocks of 256).
constexpr size_t kMaxSharedPerBlock = size_t{227} * 1024;
constexpr size_t kSharedPerSm = size_t{228} * 1024;
constexpr size_t kReservedPerBlock = 1024;
constexpr int kMaxBlocksPerSm = 8;

struct Dtype {
  int element_bytes;
  int chunk;  // the kernel's chunk for that dtype
};
constexpr Dtype kBFloat16{2, 64};
constexpr Dtype kFloat32{4, 32};

PrefillSchedule Plan(Dtype dtype, int64_t batch_heads, int64_t length, int m, int e, int sms) {
  const int mp = RoundUpTo16(m);
  auto shared_bytes = [&](int et) {
    return MakePrefillSharedLayout(dtype.element_bytes, dtype.chunk, mp, et).total;
  };
  auto resident_per_sm = [](int /*et*/, size_t bytes) {
    return static_cast<int>(
        std::min<size_t>(kMaxBlocksPerSm, kSharedPerSm / (bytes + kReservedPerBlock)));
  };
  const int64_t chunks = (length + dtype.chunk - 1) / dtype.chunk;
  return PlanPrefillSchedule(batch_heads, chunks, e, sms, kMaxSharedPerBlock, shared_bytes,
                             resident_per_sm);
}

// The bench model's attention (8 heads, M 256, E 64 + the normaliser
// column, bf16): one block per SM. Rounding the segment count up instead
// would give 17 segments of 61 chunks at L = 64k (136 blocks on 132 SMs: 4
// blocks in a second wave, doubling the time), and narrowing the tile to 32
// columns at L = 1k would give 192 blocks (two waves).
TEST(PrefillSchedule, BenchModelRunsInOneWave) {
  struct Expected {
    int64_t length;
    int et, segments;
    int64_t segment_chunks;
  };
  for (const Expected& x : {Expected{1024, 48, 8, 2}, Expected{4096, 80, 16, 4},
                            Expected{16384, 80, 16, 16}, Expected{65536, 80, 16, 64}}) {
    SCOPED_TRACE("L " + std::to_string(x.length));
    const PrefillSchedule plan = Plan(kBFloat16, 8, x.length, 256, 65, 132);
    ASSERT_EQ(plan.error, nullptr);
    EXPECT_EQ(plan.capacity, 132) << "one 222 KB block per SM";
    EXPECT_EQ(plan.et, x.et);
    EXPECT_EQ(plan.segments, x.segments);
    EXPECT_EQ(plan.segment_chunks, x.segment_chunks);
    EXPECT_LE(plan.blocks, plan.capacity);
  }
}

TEST(PrefillSchedule, CoversEveryChunkAndColumnWithinOneWave) {
  for (Dtype dtype : {kBFloat16, kFloat32}) {
    for (int sms : {1, 132}) {
      for (int64_t batch_heads : {1, 3, 8, 64, 512}) {
        for (int64_t length : {1, 63, 64, 65, 200, 1000, 3001, 65536}) {
          for (int m : {1, 64, 256, 512}) {
            for (int e : {1, 33, 65, 200}) {
              SCOPED_TRACE("bytes " + std::to_string(dtype.element_bytes) + " SMs " +
                           std::to_string(sms) + " BH " + std::to_string(batch_heads) + " L " +
                           std::to_string(length) + " M " + std::to_string(m) + " E " +
                           std::to_string(e));
              const PrefillSchedule plan = Plan(dtype, batch_heads, length, m, e, sms);
              ASSERT_EQ(plan.error, nullptr);
              const int64_t chunks = (length + dtype.chunk - 1) / dtype.chunk;
              ASSERT_EQ(plan.et % 16, 0);
              ASSERT_GE(plan.et, 16);
              EXPECT_LE(plan.shared_bytes, kMaxSharedPerBlock);
              EXPECT_EQ(plan.shared_bytes, MakePrefillSharedLayout(dtype.element_bytes, dtype.chunk,
                                                                   RoundUpTo16(m), plan.et)
                                               .total);
              EXPECT_GE(static_cast<int64_t>(plan.e_tiles) * plan.et, e);
              EXPECT_LT(static_cast<int64_t>(plan.e_tiles - 1) * plan.et, e);
              ASSERT_GE(plan.segments, 1);
              EXPECT_GE(plan.segments * plan.segment_chunks, chunks) << "a chunk is left out";
              EXPECT_LT((plan.segments - 1) * plan.segment_chunks, chunks) << "a segment is empty";
              if (plan.segments > 1) {
                EXPECT_GE(plan.segment_chunks, 2);
                EXPECT_LE(plan.blocks, plan.capacity) << "a split that needs a second wave";
              }
              EXPECT_EQ(plan.blocks, batch_heads * plan.segments * plan.e_tiles);
            }
          }
        }
      }
    }
  }
}

TEST(PrefillSchedule, RefusesFeaturesWhoseChunkDoesNotFitOneBlock) {
  const PrefillSchedule plan = Plan(kBFloat16, 8, 4096, 4096, 65, 132);  // Qc, Kc alone: 1 MB
  ASSERT_NE(plan.error, nullptr);
  EXPECT_NE(std::string(plan.error).find("too large for the shared memory"), std::string::npos);
}

}  // namespace
}  // namespace performer::kernels::cuda
