// kernels::WindowedRingAttention on the CPU: a token's output and the rings
// after it are the same bits however its sequence is fed (one call of T
// tokens, or chunks, or single steps) and whatever other sequences share the
// call; its values are local attention's (checked against the module's full
// forward in tests/core/attention/windowed_local_attention_test.cc); bad
// shapes are errors that say what was wrong.
#include "kernels/windowed_ring_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace performer::kernels {
namespace {

constexpr int64_t kHeads = 2, kDims = 8, kWindow = 4, kTokens = 19;

struct Rings {
  torch::Tensor k, v;
};

Rings EmptyRings(int64_t sequences) {
  return {torch::zeros({sequences, kHeads, 2 * kWindow, kDims}),
          torch::zeros({sequences, kHeads, 2 * kWindow, kDims})};
}

// The rotary of each window-relative slot (any fixed table serves here).
torch::Tensor Table(double phase) {
  return torch::cos(
      torch::arange(2 * kWindow * kDims, torch::kFloat).view({2 * kWindow, kDims}) * 0.37 + phase);
}

class WindowedRingAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(81);
    q_ = torch::randn({3, kTokens, kHeads, kDims});
    k_ = torch::randn({3, kTokens, kHeads, kDims});
    v_ = torch::randn({3, kTokens, kHeads, kDims});
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

  torch::Tensor q_, k_, v_;
  const torch::Tensor cos_ = Table(0.0), sin_ = Table(1.3);
};

TEST_F(WindowedRingAttentionTest, ATokenHasTheSameBitsHoweverItsSequenceIsFed) {
  Rings whole = EmptyRings(3);
  const torch::Tensor all = Run(whole, 0, 3, 0, kTokens, /*start=*/5);
  for (int64_t chunk : {1, 3, 7}) {
    Rings fed = EmptyRings(3);
    std::vector<torch::Tensor> parts;
    for (int64_t begin = 0; begin < kTokens; begin += chunk) {
      parts.push_back(Run(fed, 0, 3, begin, std::min(kTokens, begin + chunk), /*start=*/5));
    }
    EXPECT_TRUE(torch::equal(torch::cat(parts, 1), all)) << "chunks of " << chunk;
    EXPECT_TRUE(torch::equal(fed.k, whole.k) && torch::equal(fed.v, whole.v))
        << "rings after chunks of " << chunk;
  }
  Rings alone = EmptyRings(1);
  EXPECT_TRUE(torch::equal(Run(alone, 1, 1, 0, kTokens, /*start=*/5), all.narrow(0, 1, 1)))
      << "sequence 1 alone differs from it among 3";
}

TEST_F(WindowedRingAttentionTest, TheFirstTokenAttendsToItselfOnly) {
  Rings rings = EmptyRings(1);
  const torch::Tensor out = Run(rings, 0, 1, 0, 1);
  EXPECT_TRUE(torch::equal(out[0][0], v_[0][0]));
  EXPECT_TRUE(torch::equal(rings.k[0].select(1, 0), k_[0][0]));
}

TEST_F(WindowedRingAttentionTest, BadShapesAreErrors) {
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

}  // namespace
}  // namespace performer::kernels
