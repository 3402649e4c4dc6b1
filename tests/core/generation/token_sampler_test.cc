#include "core/generation/token_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

namespace performer::generation {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Deterministic pseudo-random logits that do not touch the global torch RNG.
torch::Tensor RandomLogits(int64_t vocab, uint64_t seed, double scale = 3.0) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return torch::randn({vocab}, gen, torch::kFloat) * scale;
}

// Logits whose softmax is exactly `probs` (up to a constant shift).
torch::Tensor LogitsFromProbs(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return torch::tensor(logits, torch::kFloat);
}

SamplingParams Seeded(uint64_t seed, float temperature = 1.0f) {
  SamplingParams p;
  p.seed = seed;
  p.temperature = temperature;
  return p;
}

std::vector<int64_t> Draw(TokenSampler& s, const torch::Tensor& logits, int n) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.Sample(logits, {}));
  return out;
}

std::set<int64_t> TopKIds(const torch::Tensor& logits, int64_t k) {
  torch::Tensor idx = std::get<1>(torch::topk(logits, k));
  std::set<int64_t> ids;
  for (int64_t i = 0; i < k; ++i) ids.insert(idx[i].item<int64_t>());
  return ids;
}

int64_t CountFinite(const torch::Tensor& t) { return torch::isfinite(t).sum().item<int64_t>(); }

TEST(TokenSamplerTest, SameSeedSameSequence) {
  torch::Tensor logits = RandomLogits(64, 1, 1.0);
  TokenSampler a(Seeded(1234));
  TokenSampler b(Seeded(1234));
  std::vector<int64_t> da = Draw(a, logits, 200);
  EXPECT_EQ(da, Draw(b, logits, 200));
  EXPECT_GT(std::set<int64_t>(da.begin(), da.end()).size(), 5u);  // Really sampling.
  EXPECT_EQ(a.seed(), 1234u);
}

TEST(TokenSamplerTest, DifferentSeedsDiffer) {
  torch::Tensor logits = RandomLogits(64, 2, 1.0);
  TokenSampler a(Seeded(1));
  TokenSampler b(Seeded(2));
  EXPECT_NE(Draw(a, logits, 200), Draw(b, logits, 200));
}

TEST(TokenSamplerTest, ReproducibleRegardlessOfOtherSamplersAndGlobalRng) {
  torch::Tensor logits = RandomLogits(32, 3, 1.0);
  TokenSampler alone(Seeded(99));
  std::vector<int64_t> expected = Draw(alone, logits, 100);

  TokenSampler mine(Seeded(99));
  TokenSampler other(Seeded(99));
  std::vector<int64_t> got;
  for (int i = 0; i < 100; ++i) {
    other.Sample(logits, {});
    torch::manual_seed(static_cast<uint64_t>(i));
    torch::rand({3});  // Consume the global generator.
    got.push_back(mine.Sample(logits, {}));
  }
  EXPECT_EQ(got, expected);
}

TEST(TokenSamplerTest, UnseededSeedCanBeReplayed) {
  torch::Tensor logits = RandomLogits(32, 4, 1.0);
  TokenSampler a(SamplingParams{});
  TokenSampler b(SamplingParams{});
  EXPECT_NE(a.seed(), b.seed());
  TokenSampler replay(Seeded(a.seed()));
  EXPECT_EQ(Draw(a, logits, 50), Draw(replay, logits, 50));
}

TEST(TokenSamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  TokenSampler s(SamplingParams::Greedy());
  for (uint64_t seed = 0; seed < 20; ++seed) {
    torch::Tensor logits = RandomLogits(100, seed);
    EXPECT_EQ(s.Sample(logits, {}), logits.argmax().item<int64_t>());
  }
  EXPECT_EQ(s.Sample(torch::tensor({1.0f, 5.0f, 3.0f, 5.0f}), {}), 1);
  EXPECT_EQ(s.Sample(torch::tensor({-kInf, -kInf, -kInf}), {}), 0);
}

TEST(TokenSamplerTest, TemperatureZeroIgnoresSeed) {
  torch::Tensor logits = RandomLogits(50, 5, 0.1);  // Flat: sampling would vary.
  const int64_t argmax = logits.argmax().item<int64_t>();
  for (uint64_t seed : {0u, 1u, 42u, 1000u}) {
    TokenSampler s(Seeded(seed, 0.0f));
    for (int64_t token : Draw(s, logits, 20)) EXPECT_EQ(token, argmax);
  }
}

TEST(TokenSamplerTest, TopKNeverEmitsFilteredToken) {
  const int64_t k = 5;
  torch::Tensor logits = RandomLogits(50, 6, 0.5);
  const std::set<int64_t> allowed = TopKIds(logits, k);
  SamplingParams p = Seeded(7, 5.0f);  // Hot: filtered tokens would be likely otherwise.
  p.top_k = k;
  TokenSampler s(p);
  torch::Tensor processed = s.ProcessLogits(logits, {});
  EXPECT_EQ(CountFinite(processed), k);
  std::set<int64_t> seen;
  for (int64_t token : Draw(s, logits, 2000)) {
    ASSERT_TRUE(allowed.count(token)) << token;
    seen.insert(token);
  }
  EXPECT_EQ(seen, allowed);
}

TEST(TokenSamplerTest, TopKKeepsExactlyKOnTiesLowestIdsFirst) {
  SamplingParams p = Seeded(8);
  p.top_k = 2;
  TokenSampler s(p);
  torch::Tensor processed = s.ProcessLogits(torch::tensor({1.0f, 3.0f, 3.0f, 3.0f, 0.0f}), {});
  EXPECT_TRUE(torch::equal(processed, torch::tensor({-kInf, 3.0f, 3.0f, -kInf, -kInf})));
}

TEST(TokenSamplerTest, FilterThresKeepsReferenceK) {
  torch::Tensor logits = RandomLogits(100, 9);
  SamplingParams p = Seeded(10, 3.0f);
  p.filter_thres = 0.9;  // Python: int((1 - 0.9) * 100) == 9.
  TokenSampler s(p);
  torch::Tensor processed = s.ProcessLogits(logits, {});
  EXPECT_EQ(CountFinite(processed), 9);
  const std::set<int64_t> allowed = TopKIds(logits, 9);
  for (int64_t id : allowed) EXPECT_EQ(processed[id].item<float>(), logits[id].item<float>());
  for (int64_t token : Draw(s, logits, 1000)) ASSERT_TRUE(allowed.count(token)) << token;
}

TEST(TokenSamplerTest, TopKAndFilterThresCombineToSmallerK) {
  torch::Tensor logits = RandomLogits(100, 11);
  SamplingParams p = Seeded(12);
  p.top_k = 30;
  p.filter_thres = 0.9;
  EXPECT_EQ(CountFinite(TokenSampler(p).ProcessLogits(logits, {})), 9);
  p.top_k = 4;
  EXPECT_EQ(CountFinite(TokenSampler(p).ProcessLogits(logits, {})), 4);
}

TEST(TokenSamplerTest, TopPNeverEmitsTokenOutsideNucleus) {
  // Sorted probs 0.5, 0.3, 0.1, 0.05, 0.05 (shuffled ids). top_p 0.7: token
  // with 0.5 (nothing before) and 0.3 (0.5 before <= 0.7) are kept; 0.1 has
  // 0.8 before it and is dropped.
  torch::Tensor logits = LogitsFromProbs({0.05, 0.3, 0.05, 0.5, 0.1});
  SamplingParams p = Seeded(13);
  p.top_p = 0.7f;
  TokenSampler s(p);
  torch::Tensor processed = s.ProcessLogits(logits, {});
  EXPECT_EQ(CountFinite(processed), 2);
  EXPECT_TRUE(std::isfinite(processed[3].item<float>()));
  EXPECT_TRUE(std::isfinite(processed[1].item<float>()));
  std::set<int64_t> seen;
  for (int64_t token : Draw(s, logits, 2000)) {
    ASSERT_TRUE(token == 1 || token == 3) << token;
    seen.insert(token);
  }
  EXPECT_EQ(seen, (std::set<int64_t>{1, 3}));
}

TEST(TokenSamplerTest, TinyTopPKeepsFirstToken) {
  torch::Tensor logits = RandomLogits(100, 14, 0.1);
  const int64_t argmax = logits.argmax().item<int64_t>();
  SamplingParams p = Seeded(15);
  p.top_p = 1e-6f;
  TokenSampler s(p);
  EXPECT_EQ(CountFinite(s.ProcessLogits(logits, {})), 1);
  for (int64_t token : Draw(s, logits, 200)) ASSERT_EQ(token, argmax);
}

TEST(TokenSamplerTest, TopPUsesTemperatureScaledProbabilities) {
  // At T = 1 the first token alone has 0.9 > top_p; at T = 10 the
  // distribution is much flatter and the nucleus grows.
  torch::Tensor logits = LogitsFromProbs({0.9, 0.04, 0.03, 0.02, 0.01});
  SamplingParams p = Seeded(16, 1.0f);
  p.top_p = 0.8f;
  EXPECT_EQ(CountFinite(TokenSampler(p).ProcessLogits(logits, {})), 1);
  p.temperature = 10.0f;
  EXPECT_GT(CountFinite(TokenSampler(p).ProcessLogits(logits, {})), 1);
}

TEST(TokenSamplerTest, RepetitionPenaltyDividesPositiveAndNegativeContextLogits) {
  SamplingParams p = Seeded(17);
  p.repetition_penalty = 2.0f;
  TokenSampler s(p);
  torch::Tensor logits = torch::tensor({2.0f, -2.0f, 4.0f, -4.0f, 1.0f});
  // Duplicates are penalized once; out-of-vocab ids are ignored.
  torch::Tensor processed = s.ProcessLogits(logits, {0, 1, 0, 1, 1, 99, -3});
  EXPECT_TRUE(torch::equal(processed, torch::tensor({1.0f, -1.0f, 4.0f, -4.0f, 1.0f})));
  // The input is not modified.
  EXPECT_EQ(logits[0].item<float>(), 2.0f);
}

TEST(TokenSamplerTest, RepetitionPenaltyAtMostOneIsNoOp) {
  torch::Tensor logits = torch::tensor({2.0f, -2.0f, 4.0f});
  for (float theta : {1.0f, 0.5f}) {
    SamplingParams p = Seeded(18);
    p.repetition_penalty = theta;
    EXPECT_TRUE(torch::equal(TokenSampler(p).ProcessLogits(logits, {0, 1, 2}), logits)) << theta;
  }
}

TEST(TokenSamplerTest, RepetitionPenaltyChangesGreedyChoice) {
  SamplingParams p = SamplingParams::Greedy();
  p.repetition_penalty = 3.0f;
  TokenSampler s(p);
  torch::Tensor logits = torch::tensor({0.5f, 3.0f, 2.0f});
  EXPECT_EQ(s.Sample(logits, {}), 1);
  EXPECT_EQ(s.Sample(logits, {1}), 2);  // 3 / 3 = 1 < 2.
}

// Pearson chi-square of `counts` against `probs`.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi2 = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double expected = probs[i] * n;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi2;
}

TEST(TokenSamplerTest, DistributionMatchesSoftmax) {
  const std::vector<float> raw = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  torch::Tensor logits = torch::tensor(raw);
  const int n = 20000;
  for (float temperature : {1.0f, 0.5f, 2.0f}) {
    torch::Tensor probs_t = torch::softmax(logits.to(torch::kDouble) / temperature, 0);
    std::vector<double> probs(probs_t.data_ptr<double>(), probs_t.data_ptr<double>() + raw.size());
    TokenSampler s(Seeded(19, temperature));
    std::vector<int> counts(raw.size(), 0);
    for (int64_t token : Draw(s, logits, n)) ++counts[token];
    // df = 4: P(chi2 > 18.47) = 0.001. Fixed seed, so this is deterministic.
    EXPECT_LT(ChiSquare(counts, probs, n), 18.47) << "temperature " << temperature;
  }
}

TEST(TokenSamplerTest, WrongTemperatureWouldFailChiSquare) {
  // Guards the check above: samples at T = 2 do not pass as T = 1.
  torch::Tensor logits = torch::tensor({1.0f, 0.0f, 2.0f, -1.0f, 0.5f});
  torch::Tensor probs_t = torch::softmax(logits.to(torch::kDouble), 0);
  std::vector<double> probs(probs_t.data_ptr<double>(), probs_t.data_ptr<double>() + 5);
  TokenSampler s(Seeded(20, 2.0f));
  std::vector<int> counts(5, 0);
  const int n = 20000;
  for (int64_t token : Draw(s, logits, n)) ++counts[token];
  EXPECT_GT(ChiSquare(counts, probs, n), 100.0);
}

TEST(TokenSamplerTest, NanAndMinusInfLogitsAreNeverEmitted) {
  torch::Tensor logits =
      torch::tensor({std::nanf(""), 0.0f, -kInf, 0.0f, std::nanf(""), -kInf}, torch::kFloat);
  TokenSampler s(Seeded(21, 5.0f));
  std::set<int64_t> seen;
  for (int64_t token : Draw(s, logits, 500)) seen.insert(token);
  EXPECT_EQ(seen, (std::set<int64_t>{1, 3}));
}

TEST(TokenSamplerTest, AcceptsHalfAndTwoDimLogits) {
  torch::Tensor logits = RandomLogits(40, 22);
  TokenSampler a(Seeded(23));
  TokenSampler b(Seeded(23));
  torch::Tensor half = logits.to(torch::kHalf);
  std::vector<int64_t> from_half = Draw(a, half, 50);
  EXPECT_EQ(from_half, Draw(b, half.to(torch::kFloat).reshape({1, 40}), 50));
  EXPECT_EQ(a.ProcessLogits(half, {}).scalar_type(), torch::kFloat);
}

TEST(TokenSamplerTest, SampleBatchMatchesPerRowSamplers) {
  const int64_t batch = 3;
  const int64_t vocab = 30;
  torch::Tensor logits = torch::stack(
      {RandomLogits(vocab, 24, 1.0), RandomLogits(vocab, 25, 1.0), RandomLogits(vocab, 26, 1.0)});
  SamplingParams penalized = Seeded(101);
  penalized.repetition_penalty = 5.0f;
  std::vector<SamplingParams> params = {penalized, Seeded(102), SamplingParams::Greedy()};
  std::vector<int64_t> context0 = {1, 2, 3};
  std::vector<int64_t> context1 = {4};

  std::vector<TokenSampler> batched_storage;
  std::vector<TokenSampler> single_storage;
  for (const SamplingParams& p : params) {
    batched_storage.emplace_back(p);
    single_storage.emplace_back(p);
  }
  std::vector<TokenSampler*> samplers;
  for (TokenSampler& s : batched_storage) samplers.push_back(&s);
  std::vector<const std::vector<int64_t>*> contexts = {&context0, &context1, nullptr};

  for (int step = 0; step < 50; ++step) {
    std::vector<int64_t> got = SampleBatch(logits, samplers, contexts);
    ASSERT_EQ(got.size(), static_cast<size_t>(batch));
    EXPECT_EQ(got[0], single_storage[0].Sample(logits[0], context0));
    EXPECT_EQ(got[1], single_storage[1].Sample(logits[1], context1));
    EXPECT_EQ(got[2], single_storage[2].Sample(logits[2], {}));
    EXPECT_EQ(got[2], logits[2].argmax().item<int64_t>());
  }
}

TEST(TokenSamplerTest, SampleBatchRejectsMismatchedSizes) {
  TokenSampler s(Seeded(27));
  std::vector<TokenSampler*> samplers = {&s};
  std::vector<const std::vector<int64_t>*> contexts = {nullptr};
  EXPECT_THROW(SampleBatch(torch::zeros({2, 4}), samplers, contexts), c10::Error);
  EXPECT_THROW(SampleBatch(torch::zeros({4}), samplers, contexts), c10::Error);
  EXPECT_EQ(SampleBatch(torch::zeros({1, 4}), samplers, contexts).size(), 1u);
}

}  // namespace
}  // namespace performer::generation
