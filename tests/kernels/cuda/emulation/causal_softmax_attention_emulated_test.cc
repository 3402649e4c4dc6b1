// The causal softmax attention kernel of kernels/cuda/
// causal_softmax_attention_cuda.cu run on the host (cuda_emulation.h):
// against the CPU op, a token's bits the same whether its row's queries come
// in one launch or one at a time and whatever the other rows, keys read
// through a pool's strided window, fewer output elements than lanes, and its
// refusals.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/causal_softmax_attention.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

struct Problem {
  int64_t rows, tokens, heads, e, d, pool;
  torch::Tensor queries, key_pool, value_pool, last;

  Problem(int64_t value_dims) : rows(2), tokens(9), heads(3), e(12), d(value_dims), pool(80) {
    torch::manual_seed(43);
    queries = torch::randn({rows, tokens, heads, e});
    key_pool = torch::randn({rows, pool, heads, e});
    value_pool = torch::randn({rows, pool, heads, d});
    // Row 1's tokens past 64 keys: two chunks of 32 and a partial third.
    const torch::Tensor start = torch::tensor({0, 60}, torch::kLong);
    last = start.unsqueeze(1) + torch::arange(tokens, torch::kLong).unsqueeze(0);
  }

  torch::Tensor Keys() const { return key_pool.narrow(1, 0, 70); }
  torch::Tensor Values() const { return value_pool.narrow(1, 0, 70); }

  // Rows [row, row + 1), tokens [first, first + count) through the kernel.
  torch::Tensor Emulated(int64_t row, int64_t first, int64_t count) const {
    const torch::Tensor q = queries.narrow(0, row, 1).narrow(1, first, count).contiguous();
    const torch::Tensor l = last.narrow(0, row, 1).narrow(1, first, count).contiguous();
    const torch::Tensor k = Keys().narrow(0, row, 1), v = Values().narrow(0, row, 1);
    torch::Tensor out = torch::empty({1, count, heads, d});
    emulated::CausalSoftmaxAttentionArgs a{};
    a.queries = q.data_ptr<float>();
    a.keys = k.data_ptr<float>();
    a.values = v.data_ptr<float>();
    a.last = l.data_ptr<int64_t>();
    a.out = out.data_ptr<float>();
    a.key_row = k.stride(0), a.key_position = k.stride(1);
    a.value_row = v.stride(0), a.value_position = v.stride(1);
    a.rows = 1, a.tokens = count, a.heads = heads, a.e = e, a.d = d;
    a.temp = 0.4f;
    const char* error = emulated::CausalSoftmaxAttentionForward(a, nullptr);
    EXPECT_EQ(error, nullptr) << error;
    return out;
  }
};

class CausalSoftmaxAttentionEmulationTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(CausalSoftmaxAttentionEmulationTest, MatchesTheCpuAndKeepsATokensBitsHoweverFed) {
  const Problem p(GetParam());
  for (int64_t row = 0; row < p.rows; ++row) {
    SCOPED_TRACE(row);
    const torch::Tensor all = p.Emulated(row, 0, p.tokens);
    const torch::Tensor cpu =
        CausalSoftmaxAttention(p.queries.narrow(0, row, 1), p.Keys().narrow(0, row, 1),
                               p.Values().narrow(0, row, 1), p.last.narrow(0, row, 1), 0.4);
    EXPECT_TRUE(torch::allclose(all, cpu, 1e-5, 1e-6))
        << "max |diff| " << (all - cpu).abs().max().item<float>();
    for (int64_t first : {0, 4, 8}) {
      EXPECT_TRUE(torch::equal(p.Emulated(row, first, 1), all.narrow(1, first, 1)))
          << "token " << first << " alone";
    }
    EXPECT_TRUE(torch::equal(p.Emulated(row, 2, 5), all.narrow(1, 2, 5)));
  }
}

// Fewer output elements than a warp's lanes, and a partial second round.
INSTANTIATE_TEST_SUITE_P(ValueWidths, CausalSoftmaxAttentionEmulationTest,
                         ::testing::Values(5, 40));

TEST(CausalSoftmaxAttentionEmulationRefusalTest, RefusesWhatItCannotHold) {
  emulated::CausalSoftmaxAttentionArgs a{};
  a.rows = 1, a.tokens = 1, a.heads = 1, a.e = 0, a.d = 4;
  EXPECT_STREQ(emulated::CausalSoftmaxAttentionForward(a, nullptr),
               "causal softmax attention needs E, D and heads >= 1");
  a.e = 2048, a.d = 2048;
  EXPECT_STREQ(emulated::CausalSoftmaxAttentionForward(a, nullptr),
               "E + D too large for the causal softmax attention kernel's shared memory");
}

}  // namespace
}  // namespace performer::kernels
