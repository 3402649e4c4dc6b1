#include "core/generation/token_sampler.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>

namespace performer::generation {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t DrawRandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

// Descending by value, ties -> lower index first: a strict total order on
// indices (values contain no NaN), so sorting/selection is deterministic.
struct DescendingThenLowerId {
  const float* v;
  bool operator()(int64_t a, int64_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

// Keeps the k largest entries of v (ties -> lower id), sets the rest to -inf.
void KeepTopK(float* v, int64_t n, int64_t k) {
  k = std::clamp<int64_t>(k, 1, n);
  if (k >= n) return;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = i;
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), DescendingThenLowerId{v});
  // idx[k..n) are the dropped ones.
  for (int64_t j = k; j < n; ++j) v[idx[j]] = kNegInf;
}

// Nucleus filter, see the header for the exact rule. probability_scale is the
// temperature used for the softmax (> 0).
void KeepTopP(float* v, int64_t n, float top_p, double probability_scale) {
  std::vector<int64_t> idx;
  idx.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] != kNegInf) idx.push_back(i);
  }
  if (idx.size() <= 1) return;
  std::sort(idx.begin(), idx.end(), DescendingThenLowerId{v});
  const double max_logit = v[idx[0]];
  if (std::isinf(max_logit)) return;  // +inf present: the softmax is degenerate, keep as is.
  std::vector<double> w(idx.size());
  double total = 0.0;
  for (size_t j = 0; j < idx.size(); ++j) {
    w[j] = std::exp((static_cast<double>(v[idx[j]]) - max_logit) / probability_scale);
    total += w[j];
  }
  const double threshold = static_cast<double>(top_p) * total;
  double cumulative = 0.0;
  for (size_t j = 0; j < idx.size(); ++j) {
    // Drop token j when the tokens before it already exceed top_p; j = 0 has
    // cumulative 0 and is always kept.
    if (j > 0 && cumulative > threshold) v[idx[j]] = kNegInf;
    cumulative += w[j];
  }
}

// Lowest index of the maximum (NaN-free input); 0 when all are -inf.
int64_t ArgMaxLowestId(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

}  // namespace

TokenSampler::TokenSampler(const SamplingParams& params)
    : params_(params),
      seed_(params.seed.has_value() ? *params.seed : DrawRandomSeed()),
      generator_(at::make_generator<at::CPUGeneratorImpl>(seed_)) {}

double TokenSampler::NextUniform() {
  const uint64_t bits = generator_.get<at::CPUGeneratorImpl>()->random64();
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

torch::Tensor TokenSampler::ProcessLogits(const torch::Tensor& logits,
                                          const std::vector<int64_t>& context) const {
  torch::Tensor out = logits.detach()
                          .reshape({-1})
                          .to(torch::kCPU, torch::kFloat, /*non_blocking=*/false, /*copy=*/true)
                          .contiguous();
  const int64_t n = out.numel();
  if (n == 0) return out;
  float* v = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(v[i])) v[i] = kNegInf;
  }

  if (params_.repetition_penalty > 1.0f) {
    std::vector<bool> penalized(static_cast<size_t>(n), false);
    for (int64_t id : context) {
      if (id < 0 || id >= n || penalized[id]) continue;
      penalized[id] = true;
      v[id] /= params_.repetition_penalty;  // Also for negative logits (reference quirk).
    }
  }

  if (params_.top_k > 0) KeepTopK(v, n, params_.top_k);
  if (params_.filter_thres.has_value()) {
    KeepTopK(v, n, FilterThresToTopK(*params_.filter_thres, n));
  }

  if (params_.top_p < 1.0f || std::isnan(params_.top_p)) {
    const bool sampling = params_.temperature > 0.0f;
    KeepTopP(v, n, std::isnan(params_.top_p) ? 0.0f : params_.top_p,
             sampling ? static_cast<double>(params_.temperature) : 1.0);
  }
  return out;
}

int64_t TokenSampler::Sample(const torch::Tensor& logits, const std::vector<int64_t>& context) {
  TORCH_CHECK(logits.numel() > 0, "TokenSampler::Sample expects non-empty logits");
  torch::Tensor processed = ProcessLogits(logits, context);
  const int64_t n = processed.numel();
  const float* v = processed.data_ptr<float>();
  const int64_t argmax = ArgMaxLowestId(v, n);

  // Greedy (also for an unvalidated negative / NaN temperature): no draw.
  if (!(params_.temperature > 0.0f)) return argmax;
  const double max_logit = v[argmax];
  // All filtered, or a +inf logit (softmax degenerates onto it): deterministic.
  if (std::isinf(max_logit)) return argmax;

  const double temperature = params_.temperature;
  std::vector<double> w(static_cast<size_t>(n));
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = v[i] == kNegInf ? 0.0 : std::exp((static_cast<double>(v[i]) - max_logit) / temperature);
    total += w[i];
  }
  // total >= 1 (the argmax contributes exp(0)).
  const double target = NextUniform() * total;
  double cumulative = 0.0;
  int64_t last_positive = argmax;
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] <= 0.0) continue;
    cumulative += w[i];
    last_positive = i;
    if (target < cumulative) return i;
  }
  return last_positive;  // Only reachable through rounding at the very top.
}

std::vector<int64_t> SampleBatch(const torch::Tensor& logits,
                                 const std::vector<TokenSampler*>& samplers,
                                 const std::vector<const std::vector<int64_t>*>& contexts) {
  TORCH_CHECK(logits.dim() == 2, "SampleBatch expects logits [B, vocab], got ", logits.dim(),
              " dims");
  const int64_t batch = logits.size(0);
  TORCH_CHECK(static_cast<int64_t>(samplers.size()) == batch &&
                  static_cast<int64_t>(contexts.size()) == batch,
              "SampleBatch: ", batch, " rows but ", samplers.size(), " samplers and ",
              contexts.size(), " contexts");
  TORCH_CHECK(batch == 0 || logits.size(1) > 0, "SampleBatch expects vocab >= 1");
  const torch::Tensor cpu = logits.detach().to(torch::kCPU, torch::kFloat).contiguous();
  static const std::vector<int64_t> kEmptyContext;
  std::vector<int64_t> tokens(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) {
    TORCH_CHECK(samplers[i] != nullptr, "SampleBatch: sampler ", i, " is null");
    const std::vector<int64_t>& context = contexts[i] != nullptr ? *contexts[i] : kEmptyContext;
    tokens[i] = samplers[i]->Sample(cpu[i], context);
  }
  return tokens;
}

}  // namespace performer::generation
