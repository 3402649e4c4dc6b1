// Small random Performer models for unit tests: a config, a model (LM or
// encoder-decoder) whose parameters and buffers (projection matrices,
// positional tables) are all random; and a FastTransformersLM built from
// its config.json with LibTorch's initialisation.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "core/models/fast_transformers_lm.h"
#include "core/models/model_folder.h"
#include "core/models/performer_config.h"

namespace performer::models::testing {

inline PerformerLMConfig TinyLMConfig() {
  PerformerLMConfig c;
  c.num_tokens = 23;
  c.max_seq_len = 40;
  c.dim = 16;
  c.depth = 2;
  c.heads = 2;
  c.dim_head = 8;
  c.causal = true;
  c.local_attn_heads = {0};
  return c;
}

// Fills every parameter and buffer with random values (seeded) so that a
// bug that ignores one of them changes the outputs.
inline void Randomize(torch::nn::Module& module, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& p : module.named_parameters()) p.value().normal_(0.0, 0.5);
  for (auto& b : module.named_buffers()) {
    if (b.key().find("inv_freq") != std::string::npos) continue;  // keep the true frequencies
    b.value().normal_(0.0, 1.0);
  }
}

inline LoadedModel RandomLM(const PerformerLMConfig& config, uint64_t seed = 7) {
  LoadedModel m;
  m.model_class = models::ModelClass::kPerformerLM;
  m.lm = PerformerLM(config);
  Randomize(*m.lm, seed);
  m.lm->eval();
  return m;
}

inline LoadedModel RandomEncDec(const PerformerEncDecConfig& config, uint64_t seed = 7) {
  LoadedModel m;
  m.model_class = models::ModelClass::kPerformerEncDec;
  m.encdec = PerformerEncDec(config);
  Randomize(*m.encdec, seed);
  m.encdec->eval();
  return m;
}

// A FastTransformersLM of `config` (its config.json), initialised after
// torch::manual_seed(seed), in eval mode.
inline LoadedModel RandomFastTransformersLM(const nlohmann::json& config, int64_t seed) {
  torch::manual_seed(seed);
  absl::StatusOr<FastTransformersLMConfig> parsed = ParseFastTransformersLMConfig(config);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<FastTransformersLM> model = FastTransformersLMImpl::Create(*parsed);
  EXPECT_TRUE(model.ok()) << model.status();
  (*model)->eval();
  LoadedModel loaded;
  loaded.model_class = ModelClass::kFastTransformersLM;
  loaded.config = config;
  loaded.ftlm = *model;
  return loaded;
}

}  // namespace performer::models::testing
