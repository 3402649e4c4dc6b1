#include "core/models/model_folder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/io/safetensors.h"
#include "core/io/state_dict.h"
#include "tests/core/models/model_test_util.h"
#include "tests/testing/cuda_device.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/remove_tree.h"

namespace performer::models {
namespace {

namespace fs = std::filesystem;

nlohmann::json ConfigJson(const PerformerLMConfig& c) {
  return {{"model_class", "PerformerLM"},
          {"num_tokens", c.num_tokens},
          {"max_seq_len", c.max_seq_len},
          {"dim", c.dim},
          {"depth", c.depth},
          {"heads", c.heads},
          {"dim_head", *c.dim_head},
          {"causal", c.causal}};
}

class ModelFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("performer_model_folder_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    model_ = testing::RandomLM(testing::TinyLMConfig());
    weights_ = io::StateDict(*model_.lm);
  }
  void TearDown() override { ::performer::testing::RemoveTree(dir_); }

  void Write(const nlohmann::json& config, const std::map<std::string, torch::Tensor>& weights) {
    std::ofstream(dir_ / "config.json") << config.dump(2);
    ASSERT_TRUE(io::SaveSafetensors((dir_ / "weights.safetensors").string(), weights).ok());
  }

  torch::Tensor Logits(const LoadedModel& m) {
    torch::NoGradGuard no_grad;
    PerformerLM lm = m.lm;
    return lm(torch::tensor({{1, 5, 2, 7}}, torch::kLong));
  }

  fs::path dir_;
  LoadedModel model_;
  std::map<std::string, torch::Tensor> weights_;
};

TEST_F(ModelFolderTest, RoundTripsWithAliasesAndRedrawCounter) {
  std::map<std::string, torch::Tensor> w = weights_;
  for (const auto& [name, t] : weights_) {
    if (name.rfind("performer.net.", 0) == 0) {
      w["performer.proj_updater.instance." + name.substr(14)] = t;
    }
  }
  w["performer.proj_updater.calls_since_last_redraw"] = torch::zeros({}, torch::kLong);
  Write(ConfigJson(testing::TinyLMConfig()), w);
  absl::StatusOr<LoadedModel> loaded = LoadModelFolder(dir_.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model_class, "PerformerLM");
  EXPECT_TRUE(torch::equal(Logits(*loaded), Logits(model_)));
}

TEST_F(ModelFolderTest, HalfPrecisionWeightsLoad) {
  for (torch::Dtype dtype : {torch::kHalf, torch::kBFloat16}) {
    std::map<std::string, torch::Tensor> w;
    for (const auto& [name, t] : weights_) w[name] = t.to(dtype);
    Write(ConfigJson(testing::TinyLMConfig()), w);
    absl::StatusOr<LoadedModel> loaded = LoadModelFolder(dir_.string());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->lm->parameters()[0].scalar_type(), torch::kFloat);
    EXPECT_TENSOR_CLOSE(Logits(*loaded), Logits(model_), 0.5, 0.1);
    EXPECT_FALSE(torch::equal(Logits(*loaded), Logits(model_)));
  }
}

TEST_F(ModelFolderTest, MismatchedAliasIsAnError) {
  std::map<std::string, torch::Tensor> w = weights_;
  const std::string key = "performer.net.layers.0.0.fn.to_q.weight";
  w["performer.proj_updater.instance.layers.0.0.fn.to_q.weight"] = w.at(key) + 1;
  Write(ConfigJson(testing::TinyLMConfig()), w);
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("differs from " + key), std::string::npos) << s;
  EXPECT_NE(s.message().find("weights.safetensors"), std::string::npos) << s;
}

TEST_F(ModelFolderTest, MissingUnexpectedAndMisShapedKeysAreListed) {
  std::map<std::string, torch::Tensor> w = weights_;
  w.erase("norm.bias");
  w["extra.weight"] = torch::zeros({2});
  w["to_out.bias"] = torch::zeros({3});
  Write(ConfigJson(testing::TinyLMConfig()), w);
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("\"norm.bias\""), std::string::npos) << s;
  EXPECT_NE(s.message().find("\"extra.weight\""), std::string::npos) << s;
  EXPECT_NE(s.message().find("to_out.bias"), std::string::npos) << s;
}

TEST_F(ModelFolderTest, ConfigProblemsNameTheFileAndKeys) {
  nlohmann::json c = ConfigJson(testing::TinyLMConfig());
  c["mystery"] = 1;
  Write(c, weights_);
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_NE(s.message().find("config.json"), std::string::npos) << s;
  EXPECT_NE(s.message().find("unknown key(s): mystery"), std::string::npos) << s;
  c = ConfigJson(testing::TinyLMConfig());
  c["model_class"] = "GPT";
  Write(c, weights_);
  EXPECT_NE(LoadModelFolder(dir_.string()).status().message().find("unknown model_class \"GPT\""),
            std::string::npos);
  c.erase("model_class");
  Write(c, weights_);
  EXPECT_NE(LoadModelFolder(dir_.string()).status().message().find("missing \"model_class\""),
            std::string::npos);
  EXPECT_EQ(LoadModelFolder((dir_ / "nope").string()).status().code(), absl::StatusCode::kNotFound);
}

// MoveTo moves every parameter and buffer of the module held.
TEST(LoadedModelCudaTest, MoveToMovesEveryTensor) {
  PERFORMER_REQUIRE_CUDA();
  LoadedModel model = testing::RandomLM(testing::TinyLMConfig());
  model.MoveTo(torch::Device(torch::kCUDA));
  int64_t tensors = 0;
  for (const torch::Tensor& t : model.lm->parameters()) {
    EXPECT_TRUE(t.is_cuda());
    ++tensors;
  }
  for (const torch::Tensor& t : model.lm->buffers()) {
    EXPECT_TRUE(t.is_cuda());
    ++tensors;
  }
  EXPECT_GT(tensors, 10);
}

TEST(CheckpointKeysTest, AxialLegacyNamesAreRenamed) {
  std::map<std::string, torch::Tensor> w = {{"pos_emb.weights_0", torch::ones({1})},
                                            {"pos_emb.weights_1", torch::zeros({1})}};
  absl::StatusOr<std::map<std::string, torch::Tensor>> n = NormalizeCheckpointKeys(w);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->count("pos_emb.weights.0"), 1u);
  EXPECT_EQ(n->count("pos_emb.weights.1"), 1u);
  EXPECT_EQ(n->count("pos_emb.weights_0"), 0u);
}

}  // namespace
}  // namespace performer::models
