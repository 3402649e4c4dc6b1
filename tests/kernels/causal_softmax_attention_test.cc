// kernels::CausalSoftmaxAttention on the CPU, in both SIMD instantiations
// and at widths that take every path of each (E a multiple of 8 or not; D
// in 64-column blocks, 8-column blocks and single columns): against masked
// softmax attention, a token's bits the same whether its sequence's queries
// come in one call or one at a time and whatever the other rows, keys read
// through a pool's strided window, and clear errors.
#include "kernels/causal_softmax_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/simd.h"

namespace performer::kernels {
namespace {

constexpr int64_t kRows = 3, kTokens = 11, kHeads = 2, kPool = 16;

struct Problem {
  torch::Tensor queries, key_pool, value_pool;  // pools [N, kPool, H, *]
  torch::Tensor last;                           // [N, kTokens]: token i at start + i

  explicit Problem(int64_t e = 8, int64_t d = 6) {
    torch::manual_seed(41);
    queries = torch::randn({kRows, kTokens, kHeads, e});
    key_pool = torch::randn({kRows, kPool, kHeads, e});
    value_pool = torch::randn({kRows, kPool, kHeads, d});
    const torch::Tensor start = torch::tensor({0, 2, 5}, torch::kLong);
    last = start.unsqueeze(1) + torch::arange(kTokens, torch::kLong).unsqueeze(0);
  }

  // The window [0, kTokens + 5) of the pools, as the slot state reads it.
  torch::Tensor Keys() const { return key_pool.narrow(1, 0, kTokens + 5); }
  torch::Tensor Values() const { return value_pool.narrow(1, 0, kTokens + 5); }
};

// (force the portable instantiation, E, D).
class CausalSoftmaxAttentionTest
    : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t>> {
 protected:
  void SetUp() override { cpu::simd::ForcePortableForTesting() = std::get<0>(GetParam()); }
  void TearDown() override { cpu::simd::ForcePortableForTesting() = false; }
  Problem MakeProblem() const { return Problem(std::get<1>(GetParam()), std::get<2>(GetParam())); }
};

TEST_P(CausalSoftmaxAttentionTest, MatchesMaskedSoftmaxAttention) {
  const Problem p = MakeProblem();
  const double temp = 0.3;
  const torch::Tensor out = CausalSoftmaxAttention(p.queries, p.Keys(), p.Values(), p.last, temp);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{kRows, kTokens, kHeads, p.value_pool.size(3)}));
  torch::Tensor scores = torch::einsum("nlhe,nthe->nhlt", {p.queries, p.Keys()}) * temp;
  const torch::Tensor t = torch::arange(kTokens + 5, torch::kLong).view({1, 1, 1, -1});
  const torch::Tensor hidden = t > p.last.unsqueeze(1).unsqueeze(-1);
  scores.masked_fill_(hidden, -std::numeric_limits<float>::infinity());
  const torch::Tensor expected =
      torch::einsum("nhlt,nthd->nlhd", {torch::softmax(scores, -1), p.Values()});
  EXPECT_TRUE(torch::allclose(out, expected, 1e-5, 1e-6))
      << "max |diff| " << (out - expected).abs().max().item<float>();
}

TEST_P(CausalSoftmaxAttentionTest, ATokensBitsDoNotDependOnItsCallOrItsRows) {
  const Problem p = MakeProblem();
  const torch::Tensor all = CausalSoftmaxAttention(p.queries, p.Keys(), p.Values(), p.last, 0.5);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < kTokens; ++i) {
      const torch::Tensor one = CausalSoftmaxAttention(
          p.queries.narrow(0, r, 1).narrow(1, i, 1), p.Keys().narrow(0, r, 1),
          p.Values().narrow(0, r, 1), p.last.narrow(0, r, 1).narrow(1, i, 1), 0.5);
      EXPECT_TRUE(torch::equal(one[0][0], all[r][i])) << "row " << r << ", token " << i;
    }
  }
  // A window as long as the pool: more hidden keys change no bit.
  EXPECT_TRUE(
      torch::equal(CausalSoftmaxAttention(p.queries, p.key_pool, p.value_pool, p.last, 0.5), all));
}

INSTANTIATE_TEST_SUITE_P(
    Simd, CausalSoftmaxAttentionTest,
    ::testing::Combine(::testing::Bool(), ::testing::Values(int64_t{5}, int64_t{8}, int64_t{64}),
                       ::testing::Values(int64_t{6}, int64_t{77}, int64_t{136})),
    [](const ::testing::TestParamInfo<std::tuple<bool, int64_t, int64_t>>& i) {
      return std::string(std::get<0>(i.param) ? "Portable" : "Native") + "_E" +
             std::to_string(std::get<1>(i.param)) + "_D" + std::to_string(std::get<2>(i.param));
    });

TEST(CausalSoftmaxAttentionErrorsTest, BadArgumentsAreErrors) {
  const Problem p;
  const auto expect_error = [](const std::function<void()>& call, const std::string& message) {
    try {
      call();
      FAIL() << "expected: " << message;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_error(
      [&] { CausalSoftmaxAttention(p.queries, p.Keys(), p.Values(), p.last + kTokens + 5, 1.0); },
      "CausalSoftmaxAttention: last must lie in [0, 16)");
  expect_error(
      [&] {
        CausalSoftmaxAttention(p.queries, p.Keys().to(torch::kDouble), p.Values(), p.last, 1.0);
      },
      "CausalSoftmaxAttention: keys and values must be float32 tensors");
  expect_error(
      [&] { CausalSoftmaxAttention(p.queries.narrow(3, 0, 4), p.Keys(), p.Values(), p.last, 1.0); },
      "CausalSoftmaxAttention: queries must be (N, n, H, E) = (3, n, 2, 8)");
  expect_error(
      [&] { CausalSoftmaxAttention(p.queries, p.Keys(), p.Values(), p.last.narrow(1, 0, 2), 1.0); },
      "CausalSoftmaxAttention: last must be (N, n) = (3, 11)");
  EXPECT_FALSE(CausalSoftmaxAttentionSupported(p.Keys().transpose(2, 3), p.Values()));
}

}  // namespace
}  // namespace performer::kernels
