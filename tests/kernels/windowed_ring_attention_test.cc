// kernels::WindowedRingAttention on the CPU: a token's output and the rings
// after it are the same bits however its sequence is fed (one call of T
// tokens, or chunks, or single steps) and whatever other sequences share the
// call, in both instantiations; its values are local attention's (against
// tensor ops here, and against the module's full forward in
// tests/core/attention/windowed_local_attention_test.cc); bad shapes are
// errors that say what was wrong.
#include "kernels/windowed_ring_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/simd.h"

namespace performer::kernels {
namespace {

constexpr int64_t kHeads = 2, kWindow = 4, kTokens = 19, kStart = 5;

struct Rings {
  torch::Tensor k, v;
};

// The rotary of each window-relative slot (any fixed table serves here).
torch::Tensor Table(int64_t dims, double phase) {
  return torch::cos(
      torch::arange(2 * kWindow * dims, torch::kFloat).view({2 * kWindow, dims}) * 0.37 + phase);
}

// ApplyHalfRotary of rows x [.., d] to table rows cos, sin [.., d].
torch::Tensor Rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor turned =
      torch::cat({-x.narrow(-1, half, x.size(-1) - half), x.narrow(-1, 0, half)}, -1);
  return x * cos + turned * sin;
}

// Each (portable or native instantiation, head dims): d a multiple of 8 or
// not, one block of lanes or several.
class WindowedRingAttentionTest : public ::testing::TestWithParam<std::tuple<bool, int64_t>> {
 protected:
  void SetUp() override {
    cpu::simd::ForcePortableForTesting() = std::get<0>(GetParam());
    dims_ = std::get<1>(GetParam());
    cos_ = Table(dims_, 0.0);
    sin_ = Table(dims_, 1.3);
    torch::manual_seed(81);
    q_ = torch::randn({3, kTokens, kHeads, dims_});
    k_ = torch::randn({3, kTokens, kHeads, dims_});
    v_ = torch::randn({3, kTokens, kHeads, dims_});
  }
  void TearDown() override { cpu::simd::ForcePortableForTesting() = false; }

  Rings EmptyRings(int64_t sequences) const {
    return {torch::zeros({sequences, kHeads, 2 * kWindow, dims_}),
            torch::zeros({sequences, kHeads, 2 * kWindow, dims_})};
  }

  // Tokens [begin, end) of sequences [first, first + count), starting at
  // positions start + begin.
  torch::Tensor Run(Rings& rings, int64_t first, int64_t count, int64_t begin, int64_t end,
                    int64_t start = 0) const {
    auto part = [&](const torch::Tensor& t) {
      return t.narrow(0, first, count).narrow(1, begin, end - begin);
    };
    return WindowedRingAttention(part(q_), part(k_), part(v_),
                                 torch::full({count}, start + begin, torch::kLong), rings.k,
                                 rings.v, cos_, sin_);
  }

  // Token t of every sequence (at position kStart + t) by tensor ops in
  // double: its query and the visible keys rotated to their window slots,
  // the softmax of the scores over the visible values. The positions before
  // kStart hold the empty rings' zeros.
  torch::Tensor Reference(int64_t t) const {
    const int64_t p = kStart + t, window_start = (p / kWindow) * kWindow - kWindow;
    const int64_t first = std::max<int64_t>(0, window_start), count = p - first + 1;
    const torch::Tensor cos = cos_.to(torch::kDouble), sin = sin_.to(torch::kDouble);
    auto from_zero = [&](const torch::Tensor& x) {
      return torch::cat({torch::zeros({3, kStart, kHeads, dims_}), x}, 1).to(torch::kDouble);
    };
    const torch::Tensor query =
        Rotate(q_.select(1, t).to(torch::kDouble) / std::sqrt(static_cast<double>(dims_)),
               cos[p - window_start], sin[p - window_start]);  // [3, H, d]
    const torch::Tensor slots = torch::arange(first - window_start, p - window_start + 1);
    const torch::Tensor keys =
        Rotate(from_zero(k_).narrow(1, first, count), cos.index_select(0, slots).unsqueeze(1),
               sin.index_select(0, slots).unsqueeze(1));
    const torch::Tensor weights = torch::softmax(torch::einsum("che,cjhe->chj", {query, keys}), -1);
    const torch::Tensor values = from_zero(v_).narrow(1, first, count);
    return torch::einsum("chj,cjhd->chd", {weights, values}).to(torch::kFloat);
  }

  int64_t dims_ = 0;
  torch::Tensor q_, k_, v_, cos_, sin_;
};

TEST_P(WindowedRingAttentionTest, MatchesLocalAttentionByTensorOps) {
  Rings rings = EmptyRings(3);
  const torch::Tensor out = Run(rings, 0, 3, 0, kTokens, kStart);
  for (int64_t t = 0; t < kTokens; ++t) {
    const torch::Tensor expected = Reference(t);
    EXPECT_TRUE(torch::allclose(out.select(1, t), expected, 1e-5, 1e-5))
        << "token " << t << ": max |diff| "
        << (out.select(1, t) - expected).abs().max().item<float>();
  }
}

TEST_P(WindowedRingAttentionTest, ATokenHasTheSameBitsHoweverItsSequenceIsFed) {
  Rings whole = EmptyRings(3);
  const torch::Tensor all = Run(whole, 0, 3, 0, kTokens, kStart);
  for (int64_t chunk : {1, 3, 7}) {
    Rings fed = EmptyRings(3);
    std::vector<torch::Tensor> parts;
    for (int64_t begin = 0; begin < kTokens; begin += chunk) {
      parts.push_back(Run(fed, 0, 3, begin, std::min(kTokens, begin + chunk), kStart));
    }
    EXPECT_TRUE(torch::equal(torch::cat(parts, 1), all)) << "chunks of " << chunk;
    EXPECT_TRUE(torch::equal(fed.k, whole.k) && torch::equal(fed.v, whole.v))
        << "rings after chunks of " << chunk;
  }
  Rings alone = EmptyRings(1);
  EXPECT_TRUE(torch::equal(Run(alone, 1, 1, 0, kTokens, kStart), all.narrow(0, 1, 1)))
      << "sequence 1 alone differs from it among 3";
}

TEST_P(WindowedRingAttentionTest, TheFirstTokenAttendsToItselfOnly) {
  Rings rings = EmptyRings(1);
  const torch::Tensor out = Run(rings, 0, 1, 0, 1);
  EXPECT_TRUE(torch::equal(out[0][0], v_[0][0]));
  EXPECT_TRUE(torch::equal(rings.k[0].select(1, 0), k_[0][0]));
}

INSTANTIATE_TEST_SUITE_P(Forms, WindowedRingAttentionTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(int64_t{6}, int64_t{8}, int64_t{32})),
                         [](const ::testing::TestParamInfo<std::tuple<bool, int64_t>>& i) {
                           return std::string(std::get<0>(i.param) ? "Portable" : "Native") + "_D" +
                                  std::to_string(std::get<1>(i.param));
                         });

using WindowedRingAttentionErrorsTest = WindowedRingAttentionTest;

TEST_P(WindowedRingAttentionErrorsTest, BadShapesAreErrors) {
  Rings rings = EmptyRings(1);
  const torch::Tensor start = torch::zeros({1}, torch::kLong);
  const torch::Tensor q = q_.narrow(0, 0, 1);
  auto message = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              WindowedRingAttention(q, q.narrow(1, 0, 3), q, start, rings.k, rings.v, cos_, sin_);
            }).find("q, k and v must be one (C, T, H, d) shape"),
            std::string::npos);
  EXPECT_NE(message([&] {
              WindowedRingAttention(q, q, q, start, rings.k.narrow(2, 0, 3).contiguous(),
                                    rings.v.narrow(2, 0, 3).contiguous(), cos_, sin_);
            }).find("rings must be (C, H, 2w, d)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              WindowedRingAttention(q, q, q, start, rings.k, rings.v, cos_.narrow(0, 0, 2), sin_);
            }).find("cos and sin must be (2w, d)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              WindowedRingAttention(q, q, q, torch::zeros({2}, torch::kLong), rings.k, rings.v,
                                    cos_, sin_);
            }).find("start must be (C,)"),
            std::string::npos);
  const torch::Tensor strided = rings.k.transpose(2, 3);
  EXPECT_FALSE(WindowedRingAttentionSupported(strided, rings.v));
  EXPECT_FALSE(WindowedRingAttentionSupported(rings.k.to(torch::kDouble), rings.v));
  EXPECT_TRUE(WindowedRingAttentionSupported(rings.k, rings.v));
}

INSTANTIATE_TEST_SUITE_P(Native, WindowedRingAttentionErrorsTest,
                         ::testing::Values(std::make_tuple(false, int64_t{8})));

}  // namespace
}  // namespace performer::kernels
