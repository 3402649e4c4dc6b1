// The read-out kernel of kernels/cuda/state_read_out_cuda.cu run on the host
// (cuda_emulation.h), with the FAVOR+ features formed in the launch and with
// features given: against the formula in float64, a row's bits the same
// among other rows whether they share one state (a source's summary,
// expanded) or each have their own, and its refusals.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

constexpr float kKernelEps = 1e-4f;

struct ReadOutProblem {
  int64_t rows, heads, d, m, e;
  torch::Tensor x, projection_t, states;  // states [rows, heads, m, e + 1]
  torch::Tensor query_features;           // [rows, heads, m], for the given-features mode

  ReadOutProblem(int64_t r, int64_t h, int64_t dims, int64_t features, int64_t value_dims)
      : rows(r), heads(h), d(dims), m(features), e(value_dims) {
    torch::manual_seed(57);
    x = torch::randn({rows, heads, d});
    projection_t = (torch::randn({d, m}) * std::pow(static_cast<double>(d), -0.25)).contiguous();
    // Summaries of positive key features: S = sum_j k_j [v_j, 1].
    const torch::Tensor keys = torch::rand({rows, heads, 9, m}) + 0.01;
    const torch::Tensor values =
        torch::cat({torch::randn({rows, heads, 9, e}), torch::ones({rows, heads, 9, 1})}, -1);
    states = torch::matmul(keys.transpose(-1, -2), values).contiguous();
    query_features = torch::rand({rows, heads, m}) + 0.01;
  }

  // The formula in float64 for rows [first, first + count), each against
  // its own state or, with `shared`, every one against state 0; with
  // `given`, the features are `query_features`, otherwise FAVOR+'s of x.
  torch::Tensor Expected(int64_t first, int64_t count, bool shared, bool given) const {
    const torch::Tensor xs = x.narrow(0, first, count).to(torch::kDouble);
    const torch::Tensor u = torch::matmul(xs, projection_t.to(torch::kDouble));
    const torch::Tensor shift =
        (xs * xs).sum(-1, true) * (0.5 / std::sqrt(double(d))) + std::get<0>(u.max(-1, true));
    const torch::Tensor q = given ? query_features.narrow(0, first, count).to(torch::kDouble)
                                  : torch::exp(u - shift) + kKernelEps;
    const torch::Tensor s = (shared ? states.narrow(0, 0, 1).expand({count, heads, m, e + 1})
                                    : states.narrow(0, first, count))
                                .to(torch::kDouble);
    const torch::Tensor n = torch::einsum("rhf,rhfj->rhj", {q, s});
    return (n.narrow(-1, 0, e) / n.narrow(-1, e, 1)).to(torch::kFloat);
  }

  torch::Tensor Emulated(int64_t first, int64_t count, bool shared, bool given) const {
    const torch::Tensor inputs = (given ? query_features : x).narrow(0, first, count).contiguous();
    const torch::Tensor s = shared ? states.narrow(0, 0, 1) : states.narrow(0, first, count);
    torch::Tensor out = torch::empty({count, heads, e});
    emulated::StateReadOutArgs a{};
    a.state = s.data_ptr<float>();
    a.state_row_stride = shared ? 0 : heads * m * (e + 1);
    a.head_inputs = inputs.data_ptr<float>();
    a.projection_t = given ? nullptr : projection_t.data_ptr<float>();
    a.out = out.data_ptr<float>();
    a.rows = count, a.heads = heads, a.features = m, a.columns = e + 1;
    a.head_dim = given ? m : d;
    a.diag_scale = static_cast<float>(0.5 / std::sqrt(static_cast<double>(d)));
    a.kernel_eps = kKernelEps;
    const char* error = emulated::StateReadOutForward(a, nullptr);
    EXPECT_EQ(error, nullptr) << error;
    return out;
  }
};

TEST(StateReadOutEmulationTest, MatchesTheFormulaAndKeepsARowsBitsAmongOthers) {
  // M = 150 and E + 1 = 131 give threads two features or columns, or one.
  const ReadOutProblem p(6, 2, 16, 150, 130);
  for (bool given : {false, true}) {
    for (bool shared : {false, true}) {
      SCOPED_TRACE(given ? "features given" : "FAVOR+ features formed");
      SCOPED_TRACE(shared ? "one shared state" : "a state per row");
      const torch::Tensor all = p.Emulated(0, 6, shared, given);
      const torch::Tensor expected = p.Expected(0, 6, shared, given);
      EXPECT_TRUE(torch::allclose(all, expected, 1e-4, 1e-5))
          << "max |diff| " << (all - expected).abs().max().item<float>();
      for (int64_t first : {0, 3, 5}) {
        EXPECT_TRUE(torch::equal(p.Emulated(first, 1, shared, given), all.narrow(0, first, 1)))
            << "row " << first << " alone";
      }
      EXPECT_TRUE(torch::equal(p.Emulated(2, 3, shared, given), all.narrow(0, 2, 3)));
    }
  }
}

TEST(StateReadOutEmulationTest, RefusesWhatItCannotHold) {
  const float projection = 0.0f;  // only its presence matters to the checks
  emulated::StateReadOutArgs a{};
  a.rows = 1, a.heads = 1, a.head_dim = 64, a.features = 256, a.columns = 1;
  EXPECT_STREQ(emulated::StateReadOutForward(a, nullptr),
               "the read-out needs D, M, E and heads >= 1");
  a.columns = 9;
  EXPECT_STREQ(emulated::StateReadOutForward(a, nullptr),
               "query features need head_dim == features");
  a.projection_t = &projection;
  a.columns = int64_t{12} * 1024;
  EXPECT_STREQ(emulated::StateReadOutForward(a, nullptr),
               "D + M + E + 1 too large for the read-out kernel's shared memory");
}

}  // namespace
}  // namespace performer::kernels
