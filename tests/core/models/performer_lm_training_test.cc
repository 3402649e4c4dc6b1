// The core PerformerLM as a trainable module: every parameter gets a
// gradient, the buffers (projection matrices, tables) get none, and each
// dropout of the config acts in training mode only.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/io/state_dict.h"
#include "core/models/initialization.h"
#include "core/models/performer_lm.h"

namespace performer::models {
namespace {

PerformerLMConfig Config() {
  PerformerLMConfig c;
  c.num_tokens = 13;
  c.max_seq_len = 24;
  c.dim = 16;
  c.depth = 2;
  c.heads = 2;
  c.dim_head = 8;
  c.nb_features = 10;
  c.causal = true;
  c.local_attn_heads = {1, 0};  // layer 0: one global + one local head
  c.local_window_size = 4;
  c.qkv_bias = true;
  c.attn_out_bias = true;
  return c;
}

PerformerLM Build(const PerformerLMConfig& config, uint64_t seed = 1) {
  torch::manual_seed(seed);
  PerformerLM model(config);
  InitializeLikeReference(*model);
  return model;
}

torch::Tensor Tokens() {
  torch::manual_seed(99);
  return torch::randint(0, 13, {3, 18}, torch::kLong);
}

TEST(PerformerLMTrainingTest, EveryParameterGetsAGradientAndNoBufferDoes) {
  for (bool reversible : {false, true}) {
    PerformerLMConfig config = Config();
    config.reversible = reversible;
    PerformerLM model = Build(config);
    model->train();
    torch::Tensor tokens = Tokens();
    torch::Tensor logits = model(tokens.narrow(1, 0, 17));
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 13}),
                                                              tokens.narrow(1, 1, 17).reshape(-1));
    loss.backward();
    for (const auto& item : model->named_parameters()) {
      const torch::Tensor& grad = item.value().grad();
      ASSERT_TRUE(grad.defined()) << item.key();
      EXPECT_GT(grad.abs().sum().item<double>(), 0.0) << item.key();
      EXPECT_TRUE(grad.isfinite().all().item<bool>()) << item.key();
    }
    int projections = 0;
    for (const auto& item : model->named_buffers()) {
      EXPECT_FALSE(item.value().requires_grad()) << item.key();
      projections += item.key().find("projection_matrix") != std::string::npos;
    }
    EXPECT_EQ(projections, 2);
  }
}

// Outputs of two training-mode forwards and of one eval-mode forward, for a
// config with the given dropouts, compared with the same weights without dropout.
void ExpectDropoutOnlyInTraining(double emb, double ff, double attn, int64_t local_heads) {
  PerformerLMConfig config = Config();
  config.local_attn_heads = {local_heads, local_heads};
  PerformerLMConfig dropped = config;
  dropped.emb_dropout = emb;
  dropped.ff_dropout = ff;
  dropped.attn_dropout = attn;
  PerformerLM plain = Build(config);
  PerformerLM model = Build(dropped);
  ASSERT_TRUE(io::LoadStateDict(*model, io::StateDict(*plain)).ok());
  torch::NoGradGuard no_grad;
  torch::Tensor tokens = Tokens();
  plain->eval();
  torch::Tensor reference = plain(tokens);
  model->train();
  torch::Tensor a = model(tokens), b = model(tokens);
  EXPECT_FALSE(torch::allclose(a, b)) << "dropout inactive in training";
  EXPECT_FALSE(torch::allclose(a, reference));
  model->eval();
  EXPECT_TRUE(torch::equal(model(tokens), reference)) << "dropout active in eval";
}

TEST(PerformerLMTrainingTest, EmbeddingDropout) { ExpectDropoutOnlyInTraining(0.3, 0, 0, 0); }
TEST(PerformerLMTrainingTest, FeedForwardDropout) { ExpectDropoutOnlyInTraining(0, 0.3, 0, 0); }
TEST(PerformerLMTrainingTest, AttentionOutputDropout) { ExpectDropoutOnlyInTraining(0, 0, 0.3, 0); }
TEST(PerformerLMTrainingTest, LocalAttentionDropout) {
  // Every head local: the attention dropout acts on the window weights and
  // after to_out; with to_out dropout alone the outputs would differ too, so
  // check the local weights separately below.
  ExpectDropoutOnlyInTraining(0, 0, 0.3, 2);
  torch::manual_seed(5);
  WindowedLocalAttention local(8, 4, /*causal=*/true, /*dropout=*/0.5);
  torch::Tensor q = torch::randn({1, 1, 9, 8}), k = torch::randn({1, 1, 9, 8});
  torch::Tensor v = torch::randn({1, 1, 9, 8});
  local->eval();
  torch::Tensor reference = local(q, k, v);
  local->train();
  EXPECT_FALSE(torch::allclose(local(q, k, v), reference));
  local->eval();
  EXPECT_TRUE(torch::equal(local(q, k, v), reference));
}

}  // namespace
}  // namespace performer::models
