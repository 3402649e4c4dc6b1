#include "kernels/local_product.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/masks.h"
#include "kernels/cpu/simd.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/gradcheck.h"

namespace performer::kernels {
namespace {

constexpr double kMasked = -1e24;

class ForcePortableSimd {
 public:
  explicit ForcePortableSimd(bool force) { cpu::simd::ForcePortableForTesting() = force; }
  ~ForcePortableSimd() { cpu::simd::ForcePortableForTesting() = false; }
};

// Zero rows appended to / prepended on the sequence axis (dim 2 of a 4-d
// tensor, dim 1 of the mask) so that shifted views index slot s = l - half + k
// as row l + k of the padded tensor, for every l < L and k < c.
int64_t PadAfter(int64_t L, int64_t S, int64_t c) {
  return std::max<int64_t>(0, L + c - 1 - c / 2 - S);
}

// The plain formulation of LocalDotProduct, one slot at a time with shifted
// key views and the diagonals of the padded mask.
torch::Tensor ReferenceLocalDot(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& mask, const torch::Tensor& key_lengths,
                                int64_t c) {
  const int64_t L = q.size(2), S = k.size(2), half = c / 2, after_pad = PadAfter(L, S, c);
  namespace F = torch::nn::functional;
  torch::Tensor k_pad = F::pad(k, F::PadFuncOptions({0, 0, half, after_pad}));
  torch::Tensor mask_pad = F::pad(mask, F::PadFuncOptions({half, after_pad}));
  torch::Tensor limit = torch::clamp_max(key_lengths, S).view({-1, 1, 1});  // (N,1,1)
  std::vector<torch::Tensor> slots;
  for (int64_t slot = 0; slot < c; ++slot) {
    torch::Tensor s = torch::arange(L, torch::kLong) - half + slot;  // (L,)
    torch::Tensor valid = (s >= 0).view({1, 1, L}) & (s.view({1, 1, L}) < limit);
    torch::Tensor dot = (q * k_pad.narrow(2, slot, L)).sum(-1) + mask_pad.diagonal(slot);
    slots.push_back(torch::where(valid, dot, torch::full({}, kMasked, q.options())));
  }
  return torch::stack(slots, -1);
}

// The plain formulation of LocalWeightedAverage with shifted value views;
// zero padding drops the slots outside [0, S).
torch::Tensor ReferenceLocalAverage(const torch::Tensor& a, const torch::Tensor& v) {
  const int64_t L = a.size(2), S = v.size(2), c = a.size(3), half = c / 2;
  namespace F = torch::nn::functional;
  torch::Tensor v_pad = F::pad(v, F::PadFuncOptions({0, 0, half, PadAfter(L, S, c)}));
  torch::Tensor out = torch::zeros({a.size(0), a.size(1), L, v.size(3)}, v.options());
  for (int64_t slot = 0; slot < c; ++slot) {
    out = out + a.select(3, slot).unsqueeze(-1) * v_pad.narrow(2, slot, L);
  }
  return out;
}

struct Config {
  int64_t n, h, l, s, e, c;
};

class LocalProductConfigs : public ::testing::TestWithParam<Config> {};

TEST_P(LocalProductConfigs, DotProductMatchesReferenceForwardAndBackward) {
  const Config cfg = GetParam();
  torch::manual_seed(17);
  torch::Tensor q = torch::randn({cfg.n, cfg.h, cfg.l, cfg.e}).requires_grad_(true);
  torch::Tensor k = torch::randn({cfg.n, cfg.h, cfg.s, cfg.e}).requires_grad_(true);
  // A finite additive mask with some -1e24 entries, as additive_matrix_finite
  // produces for masked positions.
  torch::Tensor mask =
      torch::randn({cfg.l, cfg.s}).masked_fill(torch::rand({cfg.l, cfg.s}) < 0.2, kMasked);
  // Lengths cover: everything, a truncated window, none, and more than S.
  std::vector<int64_t> lengths_vec;
  for (int64_t i = 0; i < cfg.n; ++i) {
    const int64_t options[] = {cfg.s, cfg.s / 2, 0, cfg.s + 3};
    lengths_vec.push_back(options[i % 4]);
  }
  torch::Tensor lengths = torch::tensor(lengths_vec, torch::kLong);
  torch::Tensor grad = torch::randn({cfg.n, cfg.h, cfg.l, cfg.c});

  torch::Tensor expected = ReferenceLocalDot(q, k, mask, lengths, cfg.c);
  auto expected_grads = torch::autograd::grad({expected}, {q, k}, {grad});
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable SIMD path" : "default SIMD path");
    ForcePortableSimd force(portable);
    torch::Tensor scores = LocalDotProduct(q, k, mask, lengths, cfg.c);
    ASSERT_EQ(scores.sizes(), expected.sizes());
    // -1e24 slots must be exactly the fill value; finite ones close.
    EXPECT_TRUE(torch::equal(scores == static_cast<float>(kMasked),
                             expected == static_cast<float>(kMasked)));
    EXPECT_TENSOR_CLOSE(scores, expected, 1e-5, 1e-5);
    auto grads = torch::autograd::grad({scores}, {q, k}, {grad});
    EXPECT_TENSOR_CLOSE(grads[0], expected_grads[0], 1e-5, 1e-5);
    EXPECT_TENSOR_CLOSE(grads[1], expected_grads[1], 1e-5, 1e-5);
  }
}

TEST_P(LocalProductConfigs, WeightedAverageMatchesReferenceForwardAndBackward) {
  const Config cfg = GetParam();
  torch::manual_seed(23);
  torch::Tensor a = torch::randn({cfg.n, cfg.h, cfg.l, cfg.c}).requires_grad_(true);
  torch::Tensor v = torch::randn({cfg.n, cfg.h, cfg.s, cfg.e + 2}).requires_grad_(true);
  torch::Tensor grad = torch::randn({cfg.n, cfg.h, cfg.l, cfg.e + 2});
  torch::Tensor expected = ReferenceLocalAverage(a, v);
  auto expected_grads = torch::autograd::grad({expected}, {a, v}, {grad});
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable SIMD path" : "default SIMD path");
    ForcePortableSimd force(portable);
    torch::Tensor out = LocalWeightedAverage(a, v);
    EXPECT_TENSOR_CLOSE(out, expected, 1e-5, 1e-5);
    auto grads = torch::autograd::grad({out}, {a, v}, {grad});
    EXPECT_TENSOR_CLOSE(grads[0], expected_grads[0], 1e-5, 1e-5);
    EXPECT_TENSOR_CLOSE(grads[1], expected_grads[1], 1e-5, 1e-5);
  }
}

// Odd and even contexts, L < S, L > S, contexts wider than the sequence, and
// more (n, h) slices than threads; E not a multiple of the vector width.
INSTANTIATE_TEST_SUITE_P(OddSizes, LocalProductConfigs,
                         ::testing::Values(Config{4, 3, 23, 23, 7, 5}, Config{4, 2, 23, 19, 9, 4},
                                           Config{3, 3, 13, 30, 16, 6}, Config{2, 2, 5, 5, 3, 11},
                                           Config{1, 1, 1, 1, 1, 1}, Config{5, 2, 40, 33, 33, 8}));

TEST(LocalProductTest, EvenContextWindowIsAsymmetric) {
  // E = 1, q = 1, k_s = s + 1: each slot shows which key it holds.
  const int64_t L = 6, c = 4;
  torch::Tensor q = torch::ones({1, 1, L, 1});
  torch::Tensor k = (torch::arange(L, torch::kFloat) + 1).view({1, 1, L, 1});
  torch::Tensor scores =
      LocalDotProduct(q, k, torch::zeros({L, L}), torch::tensor({L}, torch::kLong), c);
  const float m = static_cast<float>(kMasked);
  // Query l sees keys l-2, l-1, l, l+1 (c/2 before, c/2 - 1 after).
  torch::Tensor expected = torch::tensor({m,   m,   1.f, 2.f,  //
                                          m,   1.f, 2.f, 3.f,  //
                                          1.f, 2.f, 3.f, 4.f,  //
                                          2.f, 3.f, 4.f, 5.f,  //
                                          3.f, 4.f, 5.f, 6.f,  //
                                          4.f, 5.f, 6.f, m})
                               .view({1, 1, L, c});
  EXPECT_TRUE(torch::equal(scores, expected)) << scores;
}

TEST(LocalProductTest, KeyLengthsTruncateAndMaskAppliesOnlyInsideTheWindow) {
  const int64_t L = 5, c = 3;
  torch::Tensor q = torch::ones({2, 1, L, 1});
  torch::Tensor k = (torch::arange(L, torch::kFloat) + 1).view({1, 1, L, 1}).repeat({2, 1, 1, 1});
  torch::Tensor mask = torch::zeros({L, L});
  mask[2][3] = -100;  // inside the window of query 2
  mask[0][4] = -100;  // outside every window that would use it
  torch::Tensor scores = LocalDotProduct(q, k, mask, torch::tensor({5, 3}, torch::kLong), c);
  const float m = static_cast<float>(kMasked);
  // Batch 0 (length 5): query 2 picks up the mask; batch 1 (length 3):
  // slots at s >= 3 are filled.
  torch::Tensor expected = torch::tensor({m,   1.f, 2.f,    //
                                          1.f, 2.f, 3.f,    //
                                          2.f, 3.f, -96.f,  //
                                          3.f, 4.f, 5.f,    //
                                          4.f, 5.f, m,      //
                                          m,   1.f, 2.f,    //
                                          1.f, 2.f, 3.f,    //
                                          2.f, 3.f, m,      //
                                          3.f, m,   m,      //
                                          m,   m,   m})
                               .view({2, 1, L, c});
  EXPECT_TRUE(torch::equal(scores, expected)) << scores;
}

TEST(LocalProductTest, WeightedAverageSkipsOutOfRangeSlots) {
  // All-ones weights and values: each output counts its in-range slots.
  const int64_t L = 4, S = 3, c = 4;
  torch::Tensor out = LocalWeightedAverage(torch::ones({1, 1, L, c}), torch::ones({1, 1, S, 2}));
  // Query l covers s in [l-2, l+1] intersected with [0, 3).
  torch::Tensor expected =
      torch::tensor({2.f, 3.f, 3.f, 2.f}).view({1, 1, L, 1}).expand({1, 1, L, 2});
  EXPECT_TRUE(torch::equal(out, expected)) << out;
}

TEST(LocalProductTest, FiniteDifferenceGradCheck) {
  torch::manual_seed(29);
  const int64_t c = 4;
  torch::Tensor lengths = torch::tensor({5, 3}, torch::kLong);
  torch::Tensor mask = torch::randn({6, 5}, torch::kDouble);
  // The -1e24 slots are constants; dropping them keeps the finite
  // differences of the sum well conditioned.
  auto dot = [&](const std::vector<torch::Tensor>& x) {
    torch::Tensor scores = LocalDotProduct(x[0], x[1], mask, lengths, c);
    return torch::where(scores > -1e20, scores, torch::zeros_like(scores));
  };
  auto mismatch = testing::GradCheck(dot, {torch::randn({2, 2, 6, 3}), torch::randn({2, 2, 5, 3})});
  EXPECT_FALSE(mismatch.has_value()) << *mismatch;

  auto average = [](const std::vector<torch::Tensor>& x) {
    return LocalWeightedAverage(x[0], x[1]);
  };
  mismatch = testing::GradCheck(average, {torch::randn({2, 2, 6, 3}), torch::randn({2, 2, 5, 4})});
  EXPECT_FALSE(mismatch.has_value()) << *mismatch;
}

TEST(LocalProductTest, SoftmaxOfARowWithoutValidKeysIsUniformOverInRangeSlots) {
  // The composition LocalAttention performs: a query whose window holds no
  // valid key gets c equal scores, hence weights 1/c on every slot, and the
  // weighted average keeps only the in-range ones.
  const int64_t L = 3, c = 3;
  torch::Tensor q = torch::randn({1, 1, L, 2});
  torch::Tensor k = torch::randn({1, 1, L, 2});
  torch::Tensor v = torch::arange(L, torch::kFloat).view({1, 1, L, 1}) + 1;
  torch::Tensor scores =
      LocalDotProduct(q, k, torch::zeros({L, L}), torch::tensor({0}, torch::kLong), c);
  torch::Tensor out = LocalWeightedAverage(torch::softmax(scores, -1), v);
  torch::Tensor expected =
      torch::tensor({(1.f + 2.f) / 3, (1.f + 2.f + 3.f) / 3, (2.f + 3.f) / 3}).view({1, 1, L, 1});
  EXPECT_TENSOR_CLOSE(out, expected, 1e-6, 1e-6);
}

TEST(LocalProductTest, AcceptsNonContiguousInputsAndOtherMaskDtypes) {
  torch::manual_seed(31);
  torch::Tensor q = torch::randn({2, 9, 3, 4}).permute({0, 2, 1, 3});
  torch::Tensor k = torch::randn({2, 9, 3, 4}).permute({0, 2, 1, 3});
  torch::Tensor mask = torch::randn({9, 9}, torch::kDouble);
  torch::Tensor lengths = torch::tensor({9, 4}, torch::kInt);
  EXPECT_TENSOR_CLOSE(LocalDotProduct(q, k, mask, lengths, 5),
                      ReferenceLocalDot(q, k, mask.to(torch::kFloat), lengths.to(torch::kLong), 5),
                      1e-5, 1e-5);
  torch::Tensor a = torch::randn({2, 9, 3, 5}).permute({0, 2, 1, 3});
  EXPECT_TENSOR_CLOSE(LocalWeightedAverage(a, k), ReferenceLocalAverage(a, k), 1e-5, 1e-5);
}

TEST(LocalProductTest, RejectsInvalidArguments) {
  torch::Tensor q = torch::randn({1, 2, 5, 4});
  torch::Tensor lengths = torch::tensor({5}, torch::kLong);
  EXPECT_THROW(LocalDotProduct(q, q, torch::zeros({5, 5}), lengths, 0), c10::Error);
  EXPECT_THROW(LocalDotProduct(q, q, torch::zeros({5, 4}), lengths, 3), c10::Error);
  EXPECT_THROW(LocalDotProduct(q, torch::randn({1, 2, 5, 3}), torch::zeros({5, 5}), lengths, 3),
               c10::Error);
  EXPECT_THROW(LocalDotProduct(q, q, torch::zeros({5, 5}), torch::tensor({5, 5}), 3), c10::Error);
  EXPECT_THROW(LocalWeightedAverage(torch::randn({1, 2, 5, 3}), torch::randn({2, 2, 5, 3})),
               c10::Error);
  EXPECT_THROW(LocalWeightedAverage(torch::randn({1, 2, 5, 3}), q.to(torch::kDouble)), c10::Error);
  torch::Tensor meta = torch::empty({1, 1, 3, 2}, torch::TensorOptions().device(torch::kMeta));
  try {
    LocalWeightedAverage(meta, meta);
    FAIL() << "expected an error for a meta tensor";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no kernel for device"), std::string::npos) << e.what();
  }
}

// The local attention fixtures, recomputed from the kernels alone:
// out = LocalWeightedAverage(softmax(t * LocalDotProduct(...)), V). This pins
// the kernels' window, fill and masking to the Python library independently
// of the attention module built on them.
TEST(LocalProductTest, ReproducesLocalAttentionFixtures) {
  int checked = 0;
  for (const std::string& name : testing::ListCases("fast_transformers")) {
    if (name.rfind("attn_local", 0) != 0) continue;
    absl::StatusOr<testing::FixtureCase> loaded = testing::LoadCase("fast_transformers", name);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const testing::FixtureCase& c = *loaded;
    SCOPED_TRACE(name);
    const nlohmann::json& params = c.spec["construct"]["params"];
    torch::Tensor q = c.input("queries").permute({0, 2, 1, 3});
    torch::Tensor k = c.input("keys").permute({0, 2, 1, 3});
    torch::Tensor v = c.input("values").permute({0, 2, 1, 3});
    const int64_t N = q.size(0), L = q.size(2), S = k.size(2), E = q.size(3);
    const std::string attn_mask = c.spec["masks"].value("attn_mask", "full");
    Mask mask = Mask::Full(L, S);
    if (attn_mask == "triangular") mask = Mask::TriangularCausal(L);
    if (attn_mask == "custom") mask = *Mask::FromBool(c.input("attn_mask"));
    torch::Tensor key_lengths = c.inputs.count("key_lengths")
                                    ? c.input("key_lengths").to(torch::kLong)
                                    : torch::full({N}, S, torch::kLong);
    const double temp = params.value("softmax_temp", 0.0);
    const double t = temp != 0.0 ? temp : 1.0 / std::sqrt(static_cast<double>(E));
    torch::Tensor scores = LocalDotProduct(q, k, mask.additive_matrix_finite(), key_lengths,
                                           params["local_context"].get<int64_t>());
    torch::Tensor out =
        LocalWeightedAverage(torch::softmax(t * scores, -1), v).permute({0, 2, 1, 3});
    torch::Tensor expected = c.expect("output");
    torch::Tensor rows = torch::ones({N, L}, torch::kBool);
    if (c.spec.contains("rows_well_defined")) {
      std::vector<bool> flat;
      for (const auto& row : c.spec["rows_well_defined"]) {
        for (const auto& x : row) flat.push_back(x.get<bool>());
      }
      for (size_t i = 0; i < flat.size(); ++i) rows.view(-1)[i] = static_cast<bool>(flat[i]);
    }
    torch::Tensor keep = rows.view({N, L, 1, 1}).expand_as(out);
    EXPECT_TENSOR_CLOSE(out.masked_select(keep), expected.masked_select(keep), c.atol(), c.rtol());
    ++checked;
  }
  if (!testing::FamilyPresent("fast_transformers")) GTEST_SKIP() << "no fixtures";
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace performer::kernels
