#include "bench/bench_model.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/models/performer_lm.h"

namespace performer::bench {

models::PerformerLMConfig BenchConfig(int64_t max_seq_len) {
  models::PerformerLMConfig c;
  c.num_tokens = 256;
  c.max_seq_len = max_seq_len;
  c.dim = 512;
  c.depth = 6;
  c.heads = 8;
  c.dim_head = 64;
  c.nb_features = 256;
  c.causal = true;
  return c;
}

models::LoadedModel BenchModel(const models::PerformerLMConfig& config) {
  models::LoadedModel m;
  m.model_class = models::ModelClass::kPerformerLM;
  m.lm = models::PerformerLM(config);
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  for (auto& p : m.lm->named_parameters()) p.value().normal_(0.0, 0.02);
  for (auto& b : m.lm->named_buffers()) b.value().normal_(0.0, 1.0);
  m.lm->eval();
  return m;
}

std::vector<int64_t> RandomTokens(int64_t n, int64_t vocab) {
  torch::Tensor t = torch::randint(vocab, {n}, torch::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

std::vector<DecodeStepVariant> DecodeStepVariants() {
  std::vector<DecodeStepVariant> variants = {{"fp32, separate ops (reference)", {}},
                                             {"fp32, fused", {}},
                                             {"bf16, fused", {}},
                                             {"int8, fused", {}}};
  variants[0].step.fused = false;
  variants[1].step.fused = true;
  variants[2].step.weight_dtype = models::WeightDtype::kBFloat16;
  variants[3].step.weight_dtype = models::WeightDtype::kInt8;
  return variants;
}

}  // namespace performer::bench
