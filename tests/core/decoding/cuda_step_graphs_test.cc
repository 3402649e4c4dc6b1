// CudaStepGraphs: the batch-size buckets it captures (what any host
// decides), its refusal to capture where the state pool is not on a GPU
// (or LibTorch has no CUDA), and, on a GPU, replays that give the logits
// and states of eager steps.
#include "core/decoding/cuda_step_graphs.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/models/model_folder.h"
#include "core/models/performer_lm.h"
#include "core/recurrent/state_pool.h"
#include "core/recurrent/state_snapshot.h"
#include "tests/core/models/model_test_util.h"
#include "tests/testing/fixtures.h"

namespace performer::decoding {
namespace {

using models::testing::RandomLM;
using models::testing::TinyLMConfig;

// Powers of two below the capacity, then the capacity itself.
TEST(CudaStepGraphsTest, BucketsArePowersOfTwoBelowCapacityThenCapacity) {
  EXPECT_EQ(CudaStepGraphs::Buckets(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(CudaStepGraphs::Buckets(2), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(CudaStepGraphs::Buckets(3), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(CudaStepGraphs::Buckets(4), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(CudaStepGraphs::Buckets(5), (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(CudaStepGraphs::Buckets(8), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(CudaStepGraphs::Buckets(9), (std::vector<int64_t>{1, 2, 4, 8, 9}));
  EXPECT_EQ(CudaStepGraphs::Buckets(100), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));
}

// A pool of no rows has nothing to capture.
TEST(CudaStepGraphsTest, NoBucketsWithoutRows) {
  EXPECT_TRUE(CudaStepGraphs::Buckets(0).empty());
  EXPECT_TRUE(CudaStepGraphs::Buckets(-1).empty());
}

// What Replay relies on for every capacity: ascending buckets from 1 to the
// capacity, so that any step of 1..capacity rows has a bucket (the first
// one at least as large), padded by fewer rows than it steps; and one graph
// per doubling, ceil(log2(capacity)) + 1 of them, so that capture stays
// cheap for a large pool.
TEST(CudaStepGraphsTest, EveryStepSizeHasABucketWithLessPaddingThanRows) {
  for (int64_t capacity = 1; capacity <= 70; ++capacity) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    const std::vector<int64_t> buckets = CudaStepGraphs::Buckets(capacity);
    ASSERT_FALSE(buckets.empty());
    EXPECT_EQ(buckets.front(), 1);
    EXPECT_EQ(buckets.back(), capacity);
    for (size_t i = 1; i < buckets.size(); ++i) EXPECT_LT(buckets[i - 1], buckets[i]);
    int64_t doublings = 0;
    while ((int64_t{1} << doublings) < capacity) ++doublings;
    EXPECT_EQ(buckets.size(), static_cast<size_t>(doublings + 1));
    for (int64_t count = 1; count <= capacity; ++count) {
      int64_t bucket = -1;
      for (int64_t b : buckets) {
        if (b >= count) {
          bucket = b;
          break;
        }
      }
      ASSERT_GE(bucket, count) << count << " rows";
      EXPECT_LT(bucket - count, count) << count << " rows: bucket " << bucket;
    }
  }
}

// Without a GPU-resident pool there is nothing to capture: a CUDA LibTorch
// refuses a pool on the CPU (FailedPrecondition), a CPU-only LibTorch every
// capture (Unimplemented). The refusal comes before any warm-up step or
// reset, so the pool's rows are left as they were.
TEST(CudaStepGraphsTest, CaptureOfACpuPoolIsRefusedAndLeavesThePool) {
  models::PerformerLM lm = RandomLM(TinyLMConfig()).lm;
  c10::InferenceMode guard;
  StatePool pool = lm->AllocateState(3);
  StateSnapshot marked = pool.Read(1);
  marked.position = 4;
  torch::manual_seed(3);
  for (std::vector<torch::Tensor>& layer : marked.layers) {
    for (torch::Tensor& t : layer) t = torch::randn_like(t);
  }
  ASSERT_TRUE(pool.Write(1, marked).ok());

  const absl::StatusOr<std::unique_ptr<CudaStepGraphs>> graphs = CudaStepGraphs::Capture(lm, pool);
  ASSERT_FALSE(graphs.ok());
#if PERFORMER_TORCH_CUDA
  EXPECT_EQ(graphs.status().code(), absl::StatusCode::kFailedPrecondition) << graphs.status();
#else
  EXPECT_EQ(graphs.status().code(), absl::StatusCode::kUnimplemented) << graphs.status();
#endif
  EXPECT_NE(std::string(graphs.status().message()).find("CUDA graphs"), std::string::npos)
      << graphs.status();

  const StateSnapshot after = pool.Read(1);
  EXPECT_EQ(after.position, 4);
  ASSERT_EQ(after.layers.size(), marked.layers.size());
  for (size_t i = 0; i < after.layers.size(); ++i) {
    ASSERT_EQ(after.layers[i].size(), marked.layers[i].size());
    for (size_t j = 0; j < after.layers[i].size(); ++j) {
      EXPECT_TRUE(torch::equal(after.layers[i][j], marked.layers[i][j])) << i << "," << j;
    }
  }
  EXPECT_EQ(pool.positions().sum().item<int64_t>(), 4);  // rows 0 and 2 still at 0
}

// On a GPU, replaying the captured graphs gives the logits of eager steps
// of the same rows of another pool, through every bucket: 3 rows (bucket 4,
// one padding row), 2 (bucket 2), 1 (bucket 1), then all 4 rows at
// different positions after the padding row was reset as a prefill would.
// The states left behind agree too.
TEST(CudaStepGraphsCudaTest, ReplayEqualsEagerSteps) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible";
  models::LoadedModel model = RandomLM(TinyLMConfig(), 5);
  models::PerformerLM lm = model.lm;
  lm->to(torch::kCUDA);
  lm->PrepareForDecoding();
  const int64_t vocab = lm->config().num_tokens;
  c10::InferenceMode guard;
  StatePool graph_pool = lm->AllocateState(4);
  StatePool eager_pool = lm->AllocateState(4);
  absl::StatusOr<std::unique_ptr<CudaStepGraphs>> captured =
      CudaStepGraphs::Capture(lm, graph_pool);
  ASSERT_TRUE(captured.ok()) << captured.status();
  CudaStepGraphs& graphs = **captured;
  EXPECT_EQ(graphs.max_rows(), 4);
  // Capture's warm-up steps are undone: every row is new again.
  EXPECT_EQ(graph_pool.positions().sum().item<int64_t>(), 0);

  int64_t step = 0;
  auto step_both = [&](int64_t count) {
    SCOPED_TRACE("step " + std::to_string(step) + " of " + std::to_string(count) + " rows");
    std::vector<int64_t> values;
    for (int64_t row = 0; row < count; ++row) values.push_back((step * 7 + row * 3 + 1) % vocab);
    const torch::Tensor tokens = torch::tensor(values, torch::kLong).to(torch::kCUDA);
    const int64_t live_length =
        eager_pool.positions().narrow(0, 0, count).max().item<int64_t>() + 1;
    const torch::Tensor eager = lm->Step(tokens, eager_pool.Rows(0, count, live_length)).cpu();
    const torch::Tensor replayed = graphs.Replay(tokens, count).cpu();
    EXPECT_TENSOR_CLOSE(replayed, eager, 1e-5, 1e-5);
    ++step;
  };
  for (int i = 0; i < 4; ++i) step_both(3);
  for (int i = 0; i < 3; ++i) step_both(2);
  for (int i = 0; i < 3; ++i) step_both(1);
  graph_pool.ResetRows(3, 1);
  eager_pool.ResetRows(3, 1);
  for (int i = 0; i < 3; ++i) step_both(4);

  for (int64_t row = 0; row < 4; ++row) {
    SCOPED_TRACE("row " + std::to_string(row));
    const StateSnapshot a = graph_pool.Read(row).OnHost();
    const StateSnapshot b = eager_pool.Read(row).OnHost();
    EXPECT_EQ(a.position, b.position);
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t i = 0; i < a.layers.size(); ++i) {
      ASSERT_EQ(a.layers[i].size(), b.layers[i].size());
      for (size_t j = 0; j < a.layers[i].size(); ++j) {
        EXPECT_TENSOR_CLOSE(a.layers[i][j], b.layers[i][j], 1e-5, 1e-5);
      }
    }
  }
  EXPECT_EQ(graph_pool.positions()[0].item<int64_t>(), 13);
  EXPECT_EQ(graph_pool.positions()[3].item<int64_t>(), 3);
}

}  // namespace
}  // namespace performer::decoding
