// The ring kernel of kernels/cuda/windowed_ring_attention_cuda.cu run on
// the host (cuda_emulation.h): against the CPU loop, and a sequence's bits
// the same fed in one call, in chunks, or beside other sequences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/windowed_ring_attention_cpu.h"
#include "tests/kernels/cuda/emulation/emulated_kernels.h"

namespace performer::kernels {
namespace {

namespace emulated = cuda_emulated;

struct Rings {
  torch::Tensor k, v;
};

struct RingProblem {
  int64_t c, t, h, d, w;
  torch::Tensor q, k, v, cos, sin;

  RingProblem(int64_t sequences, int64_t tokens, int64_t heads, int64_t dims, int64_t window)
      : c(sequences), t(tokens), h(heads), d(dims), w(window) {
    torch::manual_seed(41);
    q = torch::randn({c, t, h, d});
    k = torch::randn({c, t, h, d});
    v = torch::randn({c, t, h, d});
    const torch::Tensor angles =
        torch::arange(2 * w, torch::kFloat).unsqueeze(1) * torch::rand({1, d});
    cos = angles.cos().contiguous();
    sin = angles.sin().contiguous();
  }
  Rings Empty(int64_t sequences) const {
    return {torch::zeros({sequences, h, 2 * w, d}), torch::zeros({sequences, h, 2 * w, d})};
  }
};

// Tokens [begin, end) of sequences [first, first + count) through the
// emulated kernel, continuing `rings`.
torch::Tensor Emulated(const RingProblem& p, Rings& rings, int64_t first, int64_t count,
                       int64_t begin, int64_t end) {
  auto cut = [&](const torch::Tensor& in) {
    return in.narrow(0, first, count).narrow(1, begin, end - begin).contiguous();
  };
  const torch::Tensor q = cut(p.q), k = cut(p.k), v = cut(p.v);
  std::vector<int64_t> start(static_cast<size_t>(count), begin);
  torch::Tensor out = torch::empty_like(q);
  emulated::WindowedRingAttentionArgs a{};
  a.q = q.data_ptr<float>(), a.k = k.data_ptr<float>(), a.v = v.data_ptr<float>();
  a.start = start.data();
  a.ring_k = rings.k.data_ptr<float>(), a.ring_v = rings.v.data_ptr<float>();
  a.cos = p.cos.data_ptr<float>(), a.sin = p.sin.data_ptr<float>();
  a.out = out.data_ptr<float>();
  a.sequences = count, a.tokens = end - begin, a.heads = p.h, a.d = p.d, a.w = p.w;
  a.query_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(p.d)));
  const char* error = emulated::WindowedRingAttentionForward(a, nullptr);
  EXPECT_EQ(error, nullptr) << error;
  return out;
}

TEST(WindowedRingAttentionEmulationTest, MatchesTheCpuLoopAndKeepsItsBitsHoweverFed) {
  // w = 4 over 13 tokens: the window moves three times; d = 40 gives lanes
  // two output dims or one.
  const RingProblem p(3, 13, 2, 40, 4);
  Rings whole = p.Empty(3);
  const torch::Tensor all = Emulated(p, whole, 0, 3, 0, 13);
  Rings host = p.Empty(3);
  const torch::Tensor expected = cpu::WindowedRingAttentionForward(
      p.q, p.k, p.v, torch::zeros({3}, torch::kLong), host.k, host.v, p.cos, p.sin);
  EXPECT_TRUE(torch::allclose(all, expected, 1e-4, 1e-5))
      << "max |diff| " << (all - expected).abs().max().item<float>();
  EXPECT_TRUE(torch::allclose(whole.k, host.k) && torch::allclose(whole.v, host.v));
  // Token by token, and in chunks of 5, 5, 3.
  for (int64_t chunk : {int64_t{1}, int64_t{5}}) {
    Rings rings = p.Empty(3);
    std::vector<torch::Tensor> parts;
    for (int64_t begin = 0; begin < 13; begin += chunk) {
      parts.push_back(Emulated(p, rings, 0, 3, begin, std::min<int64_t>(13, begin + chunk)));
    }
    EXPECT_TRUE(torch::equal(torch::cat(parts, 1), all)) << "chunks of " << chunk << " differ";
    EXPECT_TRUE(torch::equal(rings.k, whole.k) && torch::equal(rings.v, whole.v));
  }
  // Sequence 2 alone.
  Rings alone = p.Empty(1);
  EXPECT_TRUE(torch::equal(Emulated(p, alone, 2, 1, 0, 13), all.narrow(0, 2, 1)));
}

TEST(WindowedRingAttentionEmulationTest, RefusesWhatItsSharedMemoryCannotHold) {
  emulated::WindowedRingAttentionArgs a{};
  a.sequences = 1, a.tokens = 1, a.heads = 1, a.d = 64, a.w = int64_t{8} * 1024;
  EXPECT_STREQ(emulated::WindowedRingAttentionForward(a, nullptr),
               "d + 2w too large for the ring attention kernel's shared memory");
}

}  // namespace
}  // namespace performer::kernels
