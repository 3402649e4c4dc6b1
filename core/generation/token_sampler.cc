#include "core/generation/token_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace performer::generation {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint64_t DrawRandomSeed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

// k of a row's top_k and filter_thres together (the smaller wins), clamped
// to [1, vocab]; vocab when neither is set.
int64_t RowTopK(const SamplingParams& p, int64_t vocab) {
  int64_t k = vocab;
  if (p.top_k > 0) k = std::min(k, p.top_k);
  if (p.filter_thres.has_value()) k = std::min(k, FilterThresToTopK(*p.filter_thres, vocab));
  return std::clamp<int64_t>(k, 1, vocab);
}

bool RowSamples(const SamplingParams& p) { return p.temperature > 0.0f; }

// Per-row (or per-entry) host values as a 1-D tensor of `type` on `device`.
template <typename T>
torch::Tensor OnDevice(const std::vector<T>& values, torch::ScalarType type,
                       const torch::Device& device) {
  return torch::tensor(values, torch::TensorOptions().dtype(type)).to(device);
}

// Descending sort with ties in id order (a stable sort of the ids).
std::tuple<torch::Tensor, torch::Tensor> SortDescending(const torch::Tensor& x) {
  return x.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true);
}

// Step 2 for the rows whose penalty is on: x[row, id] /= theta for each
// distinct in-vocabulary id of the row's context.
void ApplyRepetitionPenalty(torch::Tensor& x, const std::vector<const SamplingParams*>& params,
                            const std::vector<const std::vector<int64_t>*>& contexts) {
  const int64_t vocab = x.size(1);
  std::vector<int64_t> rows, ids;
  std::vector<float> thetas;
  std::vector<bool> seen;
  for (size_t r = 0; r < params.size(); ++r) {
    const float theta = params[r]->repetition_penalty;
    if (!(theta > 1.0f) || contexts[r] == nullptr) continue;
    seen.assign(static_cast<size_t>(vocab), false);
    for (int64_t id : *contexts[r]) {
      if (id < 0 || id >= vocab || seen[id]) continue;
      seen[id] = true;
      rows.push_back(static_cast<int64_t>(r));
      ids.push_back(id);
      thetas.push_back(theta);
    }
  }
  if (rows.empty()) return;
  const torch::Tensor r = OnDevice(rows, torch::kLong, x.device());
  const torch::Tensor i = OnDevice(ids, torch::kLong, x.device());
  const torch::Tensor t = OnDevice(thetas, torch::kFloat, x.device());
  x.index_put_({r, i}, x.index({r, i}) / t);
}

// Step 3: keeps the k[row] largest of each row (ties -> lower id).
void ApplyTopK(torch::Tensor& x, const std::vector<int64_t>& k) {
  const int64_t vocab = x.size(1);
  auto [values, order] = SortDescending(x);
  const torch::Tensor keep_count = OnDevice(k, torch::kLong, x.device()).unsqueeze(1);  // [B, 1]
  const torch::Tensor rank = torch::arange(vocab, x.options().dtype(torch::kLong)).unsqueeze(0);
  x.scatter_(1, order, values.masked_fill(rank >= keep_count, kNegInf));
}

// Step 4 for the rows with top_p[row] < 1 (enabled[row]); scale[row] is the
// temperature of the row's softmax.
void ApplyTopP(torch::Tensor& x, const std::vector<double>& top_p, const std::vector<double>& scale,
               const std::vector<uint8_t>& enabled) {
  const int64_t vocab = x.size(1);
  const auto device = x.device();
  auto [values, order] = SortDescending(x);
  const torch::Tensor sorted = values.to(torch::kDouble);
  const torch::Tensor max = sorted.select(1, 0).unsqueeze(1);
  const torch::Tensor weights =
      ((sorted - max) / OnDevice(scale, torch::kDouble, device).unsqueeze(1)).exp();
  const torch::Tensor cumulative = weights.cumsum(1);
  const torch::Tensor total = cumulative.select(1, vocab - 1).unsqueeze(1);
  // Weight of the tokens before each one (exactly the running sum).
  const torch::Tensor before =
      torch::cat({torch::zeros_like(max), cumulative.slice(1, 0, vocab - 1)}, 1);
  // A row with +inf or with every token filtered has no usable softmax:
  // it is left as it is.
  const torch::Tensor row_ok = OnDevice(enabled, torch::kBool, device).unsqueeze(1) &
                               torch::isfinite(max) & (values.select(1, 1) != kNegInf).unsqueeze(1);
  const torch::Tensor drop =
      (before > OnDevice(top_p, torch::kDouble, device).unsqueeze(1) * total) & row_ok;
  x.scatter_(1, order, values.masked_fill(drop, kNegInf));
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
  return ProcessLogitsBatch(logits.reshape({1, -1}), {&params_}, {&context})[0].to(torch::kCPU);
}

int64_t TokenSampler::Sample(const torch::Tensor& logits, const std::vector<int64_t>& context) {
  TORCH_CHECK(logits.numel() > 0, "TokenSampler::Sample expects non-empty logits");
  return SampleBatch(logits.reshape({1, -1}), {this}, {&context})[0];
}

torch::Tensor ProcessLogitsBatch(const torch::Tensor& logits,
                                 const std::vector<const SamplingParams*>& params,
                                 const std::vector<const std::vector<int64_t>*>& contexts) {
  TORCH_CHECK(logits.dim() == 2, "ProcessLogitsBatch expects logits [B, vocab], got ", logits.dim(),
              " dims");
  const int64_t batch = logits.size(0);
  const int64_t vocab = logits.size(1);
  TORCH_CHECK(static_cast<int64_t>(params.size()) == batch &&
                  static_cast<int64_t>(contexts.size()) == batch,
              "ProcessLogitsBatch: ", batch, " rows but ", params.size(), " parameter sets and ",
              contexts.size(), " contexts");
  torch::Tensor x = logits.detach().to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
  if (batch == 0 || vocab == 0) return x;
  x.masked_fill_(x.isnan(), kNegInf);

  bool any_penalty = false, any_top_k = false, any_top_p = false;
  std::vector<int64_t> k(static_cast<size_t>(batch));
  std::vector<double> top_p(static_cast<size_t>(batch)), scale(static_cast<size_t>(batch));
  std::vector<uint8_t> top_p_on(static_cast<size_t>(batch));
  for (int64_t r = 0; r < batch; ++r) {
    const SamplingParams& p = *params[r];
    any_penalty |= p.repetition_penalty > 1.0f;
    k[r] = RowTopK(p, vocab);
    any_top_k |= k[r] < vocab;
    const bool nucleus = p.top_p < 1.0f || std::isnan(p.top_p);
    top_p_on[r] = nucleus ? 1 : 0;
    any_top_p |= nucleus;
    top_p[r] = std::isnan(p.top_p) ? 0.0 : static_cast<double>(p.top_p);
    scale[r] = RowSamples(p) ? static_cast<double>(p.temperature) : 1.0;
  }
  if (any_penalty) ApplyRepetitionPenalty(x, params, contexts);
  if (any_top_k) ApplyTopK(x, k);
  if (any_top_p && vocab > 1) ApplyTopP(x, top_p, scale, top_p_on);
  return x;
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
  if (batch == 0) return {};
  const int64_t vocab = logits.size(1);
  std::vector<const SamplingParams*> params(static_cast<size_t>(batch));
  std::vector<double> uniform(static_cast<size_t>(batch), 0.0);
  std::vector<double> temperature(static_cast<size_t>(batch), 1.0);
  std::vector<uint8_t> samples(static_cast<size_t>(batch), 0);
  bool any_samples = false;
  for (int64_t r = 0; r < batch; ++r) {
    TORCH_CHECK(samplers[r] != nullptr, "SampleBatch: sampler ", r, " is null");
    params[r] = &samplers[r]->params();
    if (RowSamples(*params[r])) {
      samples[r] = 1;
      any_samples = true;
      temperature[r] = params[r]->temperature;
      uniform[r] = samplers[r]->NextUniform();
    }
  }
  const torch::Tensor x = ProcessLogitsBatch(logits, params, contexts);
  torch::Tensor tokens = x.argmax(1);  // ties -> the lowest id
  if (any_samples) {
    const auto device = x.device();
    const torch::Tensor xd = x.to(torch::kDouble);
    const torch::Tensor max = xd.gather(1, tokens.unsqueeze(1));
    const torch::Tensor weights =
        ((xd - max) / OnDevice(temperature, torch::kDouble, device).unsqueeze(1)).exp();
    const torch::Tensor cumulative = weights.cumsum(1);
    const torch::Tensor target = OnDevice(uniform, torch::kDouble, device).unsqueeze(1) *
                                 cumulative.select(1, vocab - 1).unsqueeze(1);
    const torch::Tensor drawn = (cumulative <= target).sum(1);
    // Rounding at the very top: the last token with a positive weight.
    const torch::Tensor ids = torch::arange(vocab, x.options().dtype(torch::kLong));
    const torch::Tensor last_positive = torch::where(weights > 0, ids, ids.new_zeros({})).amax(1);
    const torch::Tensor sampled = torch::where(drawn < vocab, drawn, last_positive);
    // Greedy rows, and rows whose maximum is +inf or -inf (every token
    // filtered), keep the argmax.
    const torch::Tensor use =
        OnDevice(samples, torch::kBool, device) & torch::isfinite(max.squeeze(1));
    tokens = torch::where(use, sampled, tokens);
  }
  const torch::Tensor host = tokens.to(torch::kCPU, torch::kLong).contiguous();
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + batch);
}

}  // namespace performer::generation
