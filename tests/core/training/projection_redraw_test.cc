#include "core/training/projection_redraw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "core/models/initialization.h"
#include "core/models/performer_lm.h"

namespace performer::training {
namespace {

models::PerformerLMConfig Config() {
  models::PerformerLMConfig c;
  c.num_tokens = 11;
  c.max_seq_len = 16;
  c.dim = 16;
  c.depth = 2;
  c.heads = 2;
  c.dim_head = 8;
  c.nb_features = 12;
  c.causal = true;
  c.local_attn_heads = {0};
  return c;
}

std::vector<torch::Tensor> Projections(torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& item : model.named_buffers()) {
    if (item.key().find("projection_matrix") != std::string::npos)
      out.push_back(item.value().clone());
  }
  return out;
}

bool AllEqual(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

bool NoneEqual(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (torch::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST(TrainProjectionRedrawTest, RedrawsEveryIntervalPlusOneForwardsLikeTheReference) {
  torch::manual_seed(3);
  models::PerformerLM model(Config());
  models::InitializeLikeReference(*model);
  ProjectionRedraw redraw(2);
  std::vector<bool> redrew;
  std::vector<torch::Tensor> before = Projections(*model);
  ASSERT_EQ(before.size(), 2u);
  for (int call = 1; call <= 7; ++call) {
    const bool r = redraw.BeforeTrainingForward(*model);
    redrew.push_back(r);
    std::vector<torch::Tensor> after = Projections(*model);
    if (r) {
      EXPECT_TRUE(NoneEqual(before, after)) << call;  // every layer's matrix is new
    } else {
      EXPECT_TRUE(AllEqual(before, after)) << call;
    }
    before = after;
  }
  // counter 0 -> 1 -> 2 -> redraw (reset) -> 1 -> 2 -> redraw -> 1
  EXPECT_EQ(redrew, (std::vector<bool>{false, false, true, false, false, true, false}));
  EXPECT_EQ(redraw.calls_since_last_redraw(), 1);
}

TEST(TrainProjectionRedrawTest, FixedOrAbsentIntervalNeverRedraws) {
  torch::manual_seed(3);
  models::PerformerLM model(Config());
  models::InitializeLikeReference(*model);
  const std::vector<torch::Tensor> before = Projections(*model);
  ProjectionRedraw none(std::nullopt);
  ProjectionRedraw fixed(0);
  fixed.Fix();
  for (int i = 0; i < 5; ++i) {
    EXPECT_FALSE(none.BeforeTrainingForward(*model));
    EXPECT_FALSE(fixed.BeforeTrainingForward(*model));
  }
  EXPECT_TRUE(AllEqual(before, Projections(*model)));
}

TEST(TrainProjectionRedrawTest, GaussianOrthogonalRowsAreOrthogonalWithinABlock) {
  torch::manual_seed(1);
  torch::Tensor m = models::GaussianOrthogonalRandomMatrix(12, 8);  // blocks of 8 and 4 rows
  ASSERT_EQ(m.sizes(), (std::vector<int64_t>{12, 8}));
  for (auto [begin, rows] : {std::pair<int64_t, int64_t>{0, 8}, {8, 4}}) {
    torch::Tensor block = m.narrow(0, begin, rows);
    torch::Tensor gram = block.matmul(block.t());
    torch::Tensor off_diagonal = gram - torch::diag(gram.diag());
    EXPECT_LT(off_diagonal.abs().max().item<double>(), 1e-4);
  }
  // Scaling 1: every row has norm sqrt(columns).
  torch::Tensor s = models::GaussianOrthogonalRandomMatrix(5, 4, 1);
  EXPECT_TRUE(torch::allclose(s.norm(2, 1), torch::full({5}, 2.0), 1e-5, 1e-5));
  EXPECT_THROW(models::GaussianOrthogonalRandomMatrix(5, 4, 2), c10::Error);
}

TEST(TrainProjectionRedrawTest, InitializationIsSeededAndFillsTheTables) {
  auto build = [](uint64_t seed) {
    torch::manual_seed(seed);
    models::PerformerLM model(Config());
    models::InitializeLikeReference(*model);
    return model;
  };
  models::PerformerLM a = build(4), b = build(4), c = build(5);
  auto buffers = [](models::PerformerLM& m) {
    std::map<std::string, torch::Tensor> out;
    for (const auto& item : m->named_buffers()) out[item.key()] = item.value();
    return out;
  };
  auto ba = buffers(a), bb = buffers(b), bc = buffers(c);
  for (const auto& [name, t] : ba) EXPECT_TRUE(torch::equal(t, bb.at(name))) << name;
  EXPECT_FALSE(torch::equal(ba.at("performer.net.layers.0.0.fn.fast_attention.projection_matrix"),
                            bc.at("performer.net.layers.0.0.fn.fast_attention.projection_matrix")));
  // Row p of the sinusoidal tables: [sin(p f), cos(p f)].
  torch::Tensor table = ba.at("layer_pos_emb.emb");
  EXPECT_NEAR(table[3][0].item<double>(), std::sin(3.0), 1e-6);
  EXPECT_NEAR(table[3][4].item<double>(), std::cos(3.0), 1e-6);
  EXPECT_TRUE(torch::equal(ba.at("pos_emb.emb"), models::SinusoidalTable(16, 16)));

  // Axial positions are drawn from N(0, 1), as axial-positional-embedding does.
  models::PerformerLMConfig axial = Config();
  axial.rotary_position_emb = false;
  axial.axial_position_emb = true;
  models::PerformerLM d(axial);
  models::InitializeLikeReference(*d);
  for (const auto& item : d->named_parameters()) {
    if (item.key().find("pos_emb.weights.") == std::string::npos) continue;
    EXPECT_NEAR(item.value().std().item<double>(), 1.0, 0.35) << item.key();
  }
}

}  // namespace
}  // namespace performer::training
