#include "core/models/model_folder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <utility>

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
  EXPECT_EQ(loaded->model_class, models::ModelClass::kPerformerLM);
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

// A crafted folder is an error naming the file, before anything is built.
TEST_F(ModelFolderTest, HostileConfigValuesAreRefusedBeforeBuilding) {
  const std::pair<const char*, nlohmann::json> cases[] = {
      {"max_seq_len", int64_t{1} << 62}, {"depth", 1000000000}, {"num_tokens", -3}};
  for (const auto& [key, value] : cases) {
    nlohmann::json c = ConfigJson(testing::TinyLMConfig());
    c[key] = value;
    Write(c, weights_);
    absl::Status s = LoadModelFolder(dir_.string()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find((dir_ / "config.json").string()), std::string::npos) << s;
    EXPECT_NE(s.message().find(std::string(key) + " must be in [1, "), std::string::npos) << s;
  }
}

// Within every bound, but describing a model far larger than the weights
// file: refused before the model is allocated.
TEST_F(ModelFolderTest, ConfigLargerThanTheWeightsIsRefused) {
  nlohmann::json c = ConfigJson(testing::TinyLMConfig());
  c["depth"] = 1024;
  c["dim"] = 8192;
  c["heads"] = 64;
  c["dim_head"] = 128;
  Write(c, weights_);
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("parameter elements, but"), std::string::npos) << s;
  EXPECT_NE(s.message().find("weights.safetensors has only"), std::string::npos) << s;
}

TEST_F(ModelFolderTest, HostileFastTransformersConfigIsRefused) {
  nlohmann::json c = {{"model_class", "FastTransformersLM"},
                      {"num_tokens", 40},
                      {"max_seq_len", 64},
                      {"encoder",
                       {{"attention_type", "causal-linear"},
                        {"n_layers", 2},
                        {"n_heads", 2},
                        {"query_dimensions", 8},
                        {"value_dimensions", 8},
                        {"feed_forward_dimensions", 32},
                        {"feature_map", {{"type", "Favor"}, {"n_dims", 1000000000}}}}}};
  Write(c, weights_);
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("\"n_dims\" must be within"), std::string::npos) << s;
  c["encoder"]["feature_map"]["n_dims"] = 16;
  c["encoder"]["n_layers"] = 1024;
  c["encoder"]["feed_forward_dimensions"] = 65536;
  Write(c, weights_);
  s = LoadModelFolder(dir_.string()).status();
  EXPECT_NE(s.message().find("parameter elements, but"), std::string::npos) << s;
}

// The [2^31, 2^31] entry with data_offsets [0, 0] once aborted the server.
TEST_F(ModelFolderTest, OverflowingWeightsEntryNamesFileAndTensor) {
  Write(ConfigJson(testing::TinyLMConfig()), weights_);
  const std::string header =
      R"({"token_emb.weight":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  // Padded so that the size check against the config passes.
  std::ofstream(dir_ / "weights.safetensors", std::ios::binary)
      << bytes << header << std::string(1 << 20, '\0');
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("weights.safetensors"), std::string::npos) << s;
  EXPECT_NE(s.message().find("tensor 'token_emb.weight'"), std::string::npos) << s;
}

// FIFOs under either file's name are refused without blocking (a test that
// regresses hangs until ctest's timeout).
TEST_F(ModelFolderTest, NonRegularFilesAreRefused) {
  Write(ConfigJson(testing::TinyLMConfig()), weights_);
  fs::remove(dir_ / "weights.safetensors");
  ASSERT_EQ(mkfifo((dir_ / "weights.safetensors").c_str(), 0600), 0);
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("weights.safetensors: is a FIFO, not a regular file"),
            std::string::npos)
      << s;
  fs::remove(dir_ / "config.json");
  ASSERT_EQ(mkfifo((dir_ / "config.json").c_str(), 0600), 0);
  s = LoadModelFolder(dir_.string()).status();
  EXPECT_NE(s.message().find("config.json: is a FIFO, not a regular file"), std::string::npos) << s;
  fs::remove(dir_ / "config.json");
  fs::create_directories(dir_ / "config.json");
  s = LoadModelFolder(dir_.string()).status();
  EXPECT_NE(s.message().find("config.json: is a directory"), std::string::npos) << s;
}

TEST_F(ModelFolderTest, OversizedOrDeepConfigIsRefused) {
  Write(ConfigJson(testing::TinyLMConfig()), weights_);
  std::ofstream(dir_ / "config.json") << std::string(17 << 20, ' ');
  absl::Status s = LoadModelFolder(dir_.string()).status();
  EXPECT_NE(s.message().find("more than the limit of"), std::string::npos) << s;
  std::ofstream(dir_ / "config.json")
      << R"({"model_class":)" << std::string(100000, '[') << std::string(100000, ']') << "}";
  s = LoadModelFolder(dir_.string()).status();
  EXPECT_NE(s.message().find("nested deeper than 64"), std::string::npos) << s;
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
