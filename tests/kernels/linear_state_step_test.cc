#include "kernels/linear_state_step.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "kernels/cpu/simd.h"
#include "tests/testing/fixtures.h"

namespace performer::kernels {
namespace {

// Plain LibTorch: S = decay S + k (x) [v, 1]; out = q . S.
torch::Tensor ReferenceStep(torch::Tensor& state, const torch::Tensor& q, const torch::Tensor& k,
                            const torch::Tensor& v, const torch::Tensor& decay) {
  torch::Tensor v1 = torch::cat({v, torch::ones({v.size(0), 1}, v.options())}, 1);
  if (decay.defined()) state.mul_(decay.view({-1, 1, 1}));
  state.add_(k.unsqueeze(-1) * v1.unsqueeze(1));
  return torch::bmm(q.unsqueeze(1), state).squeeze(1);
}

class LinearStateStepTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { cpu::simd::ForcePortableForTesting() = GetParam(); }
  void TearDown() override { cpu::simd::ForcePortableForTesting() = false; }
};

TEST_P(LinearStateStepTest, MatchesTensorOpsOverSeveralSteps) {
  torch::manual_seed(3);
  for (auto [rows, features, dims] :
       {std::tuple<int64_t, int64_t, int64_t>{5, 7, 3}, {16, 33, 64}, {3, 256, 64}, {1, 1, 1}}) {
    torch::Tensor state = torch::randn({rows, features, dims + 1});
    torch::Tensor expected_state = state.clone();
    for (int step = 0; step < 3; ++step) {
      torch::Tensor q = torch::rand({rows, features}), k = torch::rand({rows, features});
      torch::Tensor v = torch::randn({rows, dims});
      torch::Tensor decay = step == 1 ? torch::rand({rows}) : torch::Tensor();
      torch::Tensor out = LinearStateStep(state, q, k, v, decay);
      torch::Tensor expected = ReferenceStep(expected_state, q, k, v, decay);
      EXPECT_TENSOR_CLOSE(out, expected, 1e-4, 1e-5);
      EXPECT_TENSOR_CLOSE(state, expected_state, 1e-5, 1e-5);
    }
  }
}

TEST_P(LinearStateStepTest, UpdatesAViewOfAPoolInPlace) {
  torch::Tensor pool = torch::zeros({6, 4, 3});
  torch::Tensor rows = pool.narrow(0, 2, 3);
  LinearStateStep(rows, torch::ones({3, 4}), torch::ones({3, 4}), torch::ones({3, 2}));
  EXPECT_EQ(pool.narrow(0, 2, 3).sum().item<float>(), 3 * 4 * 3);
  EXPECT_EQ(pool.narrow(0, 0, 2).abs().sum().item<float>(), 0);
  EXPECT_EQ(pool.narrow(0, 5, 1).abs().sum().item<float>(), 0);
}

INSTANTIATE_TEST_SUITE_P(Simd, LinearStateStepTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("Portable") : std::string("Native");
                         });

TEST(LinearStateStepChecks, BadShapesAreErrors) {
  torch::Tensor state = torch::zeros({2, 4, 3});
  EXPECT_THROW(
      LinearStateStep(state, torch::ones({2, 5}), torch::ones({2, 4}), torch::ones({2, 2})),
      c10::Error);
  EXPECT_THROW(
      LinearStateStep(state, torch::ones({2, 4}), torch::ones({2, 4}), torch::ones({2, 3})),
      c10::Error);
  torch::Tensor doubles = torch::zeros({2, 4, 3}, torch::kDouble);
  EXPECT_FALSE(LinearStateStepSupported(doubles));
  EXPECT_FALSE(LinearStateStepSupported(torch::zeros({4, 3, 2}).transpose(0, 1)));
}

}  // namespace
}  // namespace performer::kernels

namespace performer::kernels {
namespace {

TEST(LinearStateStepNormalizedTest, MatchesTheFormula) {
  torch::manual_seed(9);
  const int64_t rows = 6, features = 20, dims = 5;
  torch::Tensor state = torch::rand({rows, features, dims + 1});
  torch::Tensor sums = torch::rand({rows, dims + 1});
  torch::Tensor q = torch::rand({rows, features}), k = torch::rand({rows, features});
  torch::Tensor v = torch::randn({rows, dims}), decay = torch::rand({rows});
  torch::Tensor expected_state = state.clone(), expected_sums = sums.clone();
  torch::Tensor raw = ReferenceStep(expected_state, q, k, v, decay);
  expected_sums.add_(torch::cat({v, torch::ones({rows, 1})}, 1));
  const double scale = 0.3, offset = 0.02, eps = 1e-3;
  torch::Tensor q_sum = q.sum(-1, true);
  torch::Tensor n = scale * raw + offset * q_sum * expected_sums;
  torch::Tensor expected = n.narrow(1, 0, dims) / (n.narrow(1, dims, 1) + eps * q_sum);
  torch::Tensor out = LinearStateStepNormalized(state, q, k, v, decay, sums, scale, offset, eps);
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(sums, expected_sums, 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(state, expected_state, 1e-5, 1e-5);
}

}  // namespace
}  // namespace performer::kernels

namespace performer::kernels {
namespace {

TEST(FavorStateStepTest, MatchesTheFeatureMapAndNormalisation) {
  torch::manual_seed(10);
  const int64_t batch = 3, heads = 2, rows = batch * heads, features = 16, dims = 4;
  torch::Tensor state = torch::rand({rows, features, dims + 1});
  torch::Tensor sums = torch::rand({rows, dims + 1});
  torch::Tensor key_max = torch::randn({rows});
  torch::Tensor projections = torch::randn({batch, 2, heads, features});
  torch::Tensor diag = torch::rand({batch, 2, heads});
  torch::Tensor v = torch::randn({rows, dims});
  const double kernel_eps = 1e-4, den_eps = 1e-6, ratio = 1.0 / std::sqrt(16.0);

  torch::Tensor uq = projections.select(1, 0).reshape({rows, features});
  torch::Tensor uk = projections.select(1, 1).reshape({rows, features});
  torch::Tensor dq = diag.select(1, 0).reshape({rows, 1}),
                dk = diag.select(1, 1).reshape({rows, 1});
  torch::Tensor q = torch::exp(uq - dq - std::get<0>(uq.max(-1, true))) + kernel_eps;
  torch::Tensor new_max = torch::maximum(key_max, uk.amax(-1));
  torch::Tensor decay = torch::exp(key_max - new_max);
  torch::Tensor k = torch::exp(uk - dk - new_max.unsqueeze(-1));
  torch::Tensor expected_state = state.clone(), expected_sums = sums.clone();
  torch::Tensor expected =
      LinearStateStepNormalized(expected_state, q, k, v, decay, expected_sums, ratio * ratio,
                                ratio * ratio * kernel_eps, den_eps * ratio);
  torch::Tensor out =
      FavorStateStep(state, key_max, sums, projections, diag, v, kernel_eps, den_eps);
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(state, expected_state, 1e-5, 1e-5);
  EXPECT_TENSOR_CLOSE(sums, expected_sums, 1e-6, 1e-6);
  EXPECT_TENSOR_CLOSE(key_max, new_max, 0, 0);
  EXPECT_THROW(
      FavorStateStep(state, key_max, sums, projections.narrow(3, 0, 8), diag, v, 1e-4, 1e-6),
      c10::Error);
}

// The step given each head's query and key forms u = x (d^-1/4 P)^T and
// diag = |x|^2 / (2 sqrt(D)) itself: it equals FavorStateStep on those, for
// rows of a pool (slots), with the (B, 2, H, D) layout of the inputs.
TEST(FavorProjectedStateStepTest, EqualsTheStepOnItsProjections) {
  torch::manual_seed(12);
  const int64_t batch = 3, heads = 2, rows = batch * heads, features = 16, dims = 4, d = 8;
  const int64_t pool = 9;
  const torch::Tensor slots = torch::tensor({7, 2, 0, 5, 8, 3}, torch::kLong);
  torch::Tensor state = torch::rand({pool, features, dims + 1});
  torch::Tensor sums = torch::rand({pool, dims + 1});
  torch::Tensor key_max = torch::randn({pool});
  torch::Tensor expected_state = state.clone(), expected_sums = sums.clone();
  torch::Tensor expected_max = key_max.clone();
  const torch::Tensor projection_t = torch::randn({d, features}) * std::pow(8.0, -0.25);
  for (int step = 0; step < 3; ++step) {
    const torch::Tensor x = torch::randn({batch, 2, heads, d}) * (1.0 + step);
    const torch::Tensor v = torch::randn({rows, dims});
    const torch::Tensor u = torch::einsum("bshi,if->bshf", {x, projection_t});
    const torch::Tensor diag = (x * x).sum(-1) / (2.0 * std::sqrt(static_cast<double>(d)));
    const torch::Tensor expected =
        FavorStateStep(expected_state, expected_max, expected_sums, u, diag, v, 1e-4, 1e-6, slots);
    const torch::Tensor out =
        FavorProjectedStateStep(state, key_max, sums, x, projection_t, v, 1e-4, 1e-6, slots);
    EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-6);
    EXPECT_TENSOR_CLOSE(state, expected_state, 1e-5, 1e-6);
    EXPECT_TENSOR_CLOSE(sums, expected_sums, 0, 0);
    EXPECT_TENSOR_CLOSE(key_max, expected_max, 1e-6, 1e-6);
  }
}

TEST(FavorProjectedStateStepTest, BadShapesAreErrors) {
  torch::Tensor state = torch::zeros({2, 16, 5}), sums = torch::zeros({2, 5});
  torch::Tensor key_max = torch::zeros({2});
  const torch::Tensor x = torch::randn({1, 2, 2, 8}), projection_t = torch::randn({8, 16});
  const torch::Tensor v = torch::randn({2, 4});
  auto message = [&](const torch::Tensor& inputs, const torch::Tensor& projection) {
    try {
      FavorProjectedStateStep(state, key_max, sums, inputs, projection, v, 1e-4, 1e-6);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(x, projection_t), "no error");
  EXPECT_NE(message(x.reshape({1, 4, 1, 8}), projection_t).find("head_inputs must be (B, 2, H, D)"),
            std::string::npos);
  EXPECT_NE(message(x, projection_t.narrow(1, 0, 8)).find("projection_t must be (D, M) = (8, 16)"),
            std::string::npos);
  EXPECT_NE(message(x, projection_t.t()).find("projection_t must be"), std::string::npos);
}

// The CPU scan of FavorProjectedStateStep is the reference: FavorStateScan on
// the projections of its inputs (the CUDA scan is one projected step launch
// per token: tests/kernels/cuda/linear_state_step_cuda_test.cc).
TEST(FavorProjectedStateScanTest, EqualsTheScanOnItsProjections) {
  torch::manual_seed(13);
  const int64_t c = 2, tokens = 5, heads = 2, features = 16, dims = 4, d = 8;
  torch::Tensor state = torch::rand({c * heads, features, dims + 1});
  torch::Tensor sums = torch::rand({c * heads, dims + 1}), key_max = torch::randn({c * heads});
  torch::Tensor expected_state = state.clone(), expected_sums = sums.clone();
  torch::Tensor expected_max = key_max.clone();
  const torch::Tensor projection_t = torch::randn({d, features}) * std::pow(8.0, -0.25);
  const torch::Tensor x = torch::randn({c, tokens, 2, heads, d});
  const torch::Tensor v = torch::randn({c, tokens, heads, dims});
  const torch::Tensor u = torch::einsum("ctshi,if->ctshf", {x, projection_t});
  const torch::Tensor diag = (x * x).sum(-1) / (2.0 * std::sqrt(static_cast<double>(d)));
  const torch::Tensor expected =
      FavorStateScan(expected_state, expected_max, expected_sums, u, diag, v, 1e-4, 1e-6);
  const torch::Tensor out =
      FavorProjectedStateScan(state, key_max, sums, x, projection_t, v, 1e-4, 1e-6);
  ASSERT_EQ(out.sizes(), torch::IntArrayRef({c, tokens, heads, dims}));
  EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-6);
  EXPECT_TENSOR_CLOSE(state, expected_state, 1e-5, 1e-6);
  EXPECT_TENSOR_CLOSE(sums, expected_sums, 0, 0);
  EXPECT_TENSOR_CLOSE(key_max, expected_max, 1e-6, 1e-6);
  auto message = [&](const torch::Tensor& inputs, const torch::Tensor& projection) {
    try {
      FavorProjectedStateScan(state, key_max, sums, inputs, projection, v, 1e-4, 1e-6);
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(x.select(1, 0), projection_t).find("head_inputs must be (C, T, 2, H, D)"),
            std::string::npos);
  EXPECT_NE(message(x, projection_t.narrow(1, 0, 8)).find("projection_t must be [8, 16]"),
            std::string::npos);
}

}  // namespace
}  // namespace performer::kernels

namespace performer::kernels {
namespace {

// Slots: stepping rows of a pool in place must equal gathering those states,
// stepping them as a dense batch, and scattering them back; the states of the
// other slots must not change.
struct SlotCase {
  std::vector<int64_t> slots;
  int64_t pool;
};

std::vector<SlotCase> SlotCases() {
  return {{{3, 0, 5, 1, 4, 2}, 6}, {{7, 2, 4}, 9}, {{0}, 1}, {{5}, 6}};
}

TEST(LinearStateStepSlotsTest, MatchesGatherStepScatter) {
  torch::manual_seed(21);
  const int64_t features = 17, dims = 33;
  for (const SlotCase& c : SlotCases()) {
    const int64_t rows = static_cast<int64_t>(c.slots.size());
    const torch::Tensor slots = torch::tensor(c.slots, torch::kLong);
    torch::Tensor pool = torch::randn({c.pool, features, dims + 1});
    torch::Tensor expected_pool = pool.clone();
    for (int step = 0; step < 2; ++step) {
      torch::Tensor q = torch::rand({rows, features}), k = torch::rand({rows, features});
      torch::Tensor v = torch::randn({rows, dims});
      torch::Tensor decay = step == 1 ? torch::rand({rows}) : torch::Tensor();
      torch::Tensor gathered = expected_pool.index_select(0, slots).contiguous();
      torch::Tensor expected = LinearStateStep(gathered, q, k, v, decay);
      expected_pool.index_copy_(0, slots, gathered);
      torch::Tensor out = LinearStateStep(pool, q, k, v, decay, slots);
      EXPECT_TENSOR_CLOSE(out, expected, 0, 0);
      EXPECT_TENSOR_CLOSE(pool, expected_pool, 0, 0);
    }
  }
}

TEST(LinearStateStepSlotsTest, NormalizedMatchesGatherStepScatter) {
  torch::manual_seed(22);
  const int64_t features = 17, dims = 33;
  for (const SlotCase& c : SlotCases()) {
    const int64_t rows = static_cast<int64_t>(c.slots.size());
    const torch::Tensor slots = torch::tensor(c.slots, torch::kLong);
    torch::Tensor pool = torch::rand({c.pool, features, dims + 1});
    torch::Tensor sums = torch::rand({c.pool, dims + 1});
    torch::Tensor expected_pool = pool.clone(), expected_sums = sums.clone();
    torch::Tensor q = torch::rand({rows, features}), k = torch::rand({rows, features});
    torch::Tensor v = torch::randn({rows, dims}), decay = torch::rand({rows});
    torch::Tensor gathered = expected_pool.index_select(0, slots).contiguous();
    torch::Tensor gathered_sums = expected_sums.index_select(0, slots).contiguous();
    torch::Tensor expected =
        LinearStateStepNormalized(gathered, q, k, v, decay, gathered_sums, 0.3, 0.02, 1e-3);
    expected_pool.index_copy_(0, slots, gathered);
    expected_sums.index_copy_(0, slots, gathered_sums);
    torch::Tensor out =
        LinearStateStepNormalized(pool, q, k, v, decay, sums, 0.3, 0.02, 1e-3, slots);
    EXPECT_TENSOR_CLOSE(out, expected, 0, 0);
    EXPECT_TENSOR_CLOSE(pool, expected_pool, 0, 0);
    EXPECT_TENSOR_CLOSE(sums, expected_sums, 0, 0);
  }
}

TEST(LinearStateStepSlotsTest, FavorMatchesGatherStepScatter) {
  torch::manual_seed(23);
  const int64_t heads = 2, features = 17, dims = 5;
  // Slots of the (b, h) rows; B * H rows of a pool of 11 states.
  const std::vector<int64_t> slot_list = {9, 2, 4, 0, 10, 7};
  const int64_t rows = static_cast<int64_t>(slot_list.size()), batch = rows / heads, pool = 11;
  const torch::Tensor slots = torch::tensor(slot_list, torch::kLong);
  torch::Tensor state = torch::rand({pool, features, dims + 1});
  torch::Tensor sums = torch::rand({pool, dims + 1});
  torch::Tensor key_max = torch::randn({pool});
  torch::Tensor expected_state = state.clone(), expected_sums = sums.clone(),
                expected_key_max = key_max.clone();
  for (int step = 0; step < 3; ++step) {
    // Growing projections make the key maximum move.
    torch::Tensor projections = torch::randn({batch, 2, heads, features}) * (1.0 + step);
    torch::Tensor diag = torch::rand({batch, 2, heads});
    torch::Tensor v = torch::randn({rows, dims});
    torch::Tensor g_state = expected_state.index_select(0, slots).contiguous();
    torch::Tensor g_sums = expected_sums.index_select(0, slots).contiguous();
    torch::Tensor g_max = expected_key_max.index_select(0, slots).contiguous();
    torch::Tensor expected =
        FavorStateStep(g_state, g_max, g_sums, projections, diag, v, 1e-4, 1e-6);
    expected_state.index_copy_(0, slots, g_state);
    expected_sums.index_copy_(0, slots, g_sums);
    expected_key_max.index_copy_(0, slots, g_max);
    torch::Tensor out =
        FavorStateStep(state, key_max, sums, projections, diag, v, 1e-4, 1e-6, slots);
    EXPECT_TENSOR_CLOSE(out, expected, 0, 0);
    EXPECT_TENSOR_CLOSE(state, expected_state, 0, 0);
    EXPECT_TENSOR_CLOSE(sums, expected_sums, 0, 0);
    EXPECT_TENSOR_CLOSE(key_max, expected_key_max, 0, 0);
  }
}

TEST(LinearStateStepSlotsTest, BadSlotsAreErrors) {
  torch::Tensor state = torch::zeros({4, 3, 3});
  const torch::Tensor q = torch::ones({2, 3}), v = torch::ones({2, 2});
  auto step = [&](const torch::Tensor& slots) { LinearStateStep(state, q, q, v, {}, slots); };
  EXPECT_NO_THROW(step(torch::tensor({3, 1}, torch::kLong)));
  EXPECT_THROW(step(torch::tensor({1, 1}, torch::kLong)), c10::Error);  // repeated
  EXPECT_THROW(step(torch::tensor({0, 4}, torch::kLong)), c10::Error);  // out of range
  EXPECT_THROW(step(torch::tensor({-1, 0}, torch::kLong)), c10::Error);
  EXPECT_THROW(step(torch::tensor({0, 1}, torch::kInt)), c10::Error);      // not int64
  EXPECT_THROW(step(torch::tensor({0, 1, 2}, torch::kLong)), c10::Error);  // R mismatch
}

// The selection the CUDA step kernel tests and benchmarks rely on to run
// each kernel and leave the default behind.
TEST(CudaStepKernelSelection, ScopedSelectionRestoresThePreviousKernel) {
  EXPECT_EQ(GetCudaStepKernel(), CudaStepKernel::kByShape);
  {
    const ScopedCudaStepKernel vector(CudaStepKernel::kVectorSplit);
    EXPECT_EQ(GetCudaStepKernel(), CudaStepKernel::kVectorSplit);
    {
      const ScopedCudaStepKernel rows(CudaStepKernel::kRowBlocks);
      EXPECT_EQ(GetCudaStepKernel(), CudaStepKernel::kRowBlocks);
    }
    EXPECT_EQ(GetCudaStepKernel(), CudaStepKernel::kVectorSplit);
    {
      const ScopedCudaStepKernel cluster(CudaStepKernel::kClusterSplit);
      EXPECT_EQ(GetCudaStepKernel(), CudaStepKernel::kClusterSplit);
    }
    EXPECT_EQ(GetCudaStepKernel(), CudaStepKernel::kVectorSplit);
  }
  EXPECT_EQ(GetCudaStepKernel(), CudaStepKernel::kByShape);
}

}  // namespace
}  // namespace performer::kernels
