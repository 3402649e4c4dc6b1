#include "core/training/trainer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/io/safetensors.h"
#include "core/training/checkpoint.h"
#include "tests/testing/remove_tree.h"

namespace performer::training {
namespace {

namespace fs = std::filesystem;

// A few kilobytes of repetitive English: a byte model learns its letter
// statistics within tens of steps.
std::string Corpus() {
  const char* sentences[] = {
      "the quick brown fox jumps over the lazy dog. ",
      "a performer attends to every token in linear time. ",
      "she sells sea shells by the sea shore. ",
      "to be or not to be, that is the question. ",
      "all work and no play makes jack a dull boy. ",
  };
  std::string text;
  for (int i = 0; i < 60; ++i) text += sentences[(i * 3 + i / 5) % 5];
  return text;
}

nlohmann::json TinyModel() {
  return {{"num_tokens", 256},
          {"max_seq_len", 64},
          {"dim", 32},
          {"depth", 2},
          {"heads", 2},
          {"dim_head", 16},
          {"nb_features", 16},
          {"local_attn_heads", {1, 0}},
          {"local_window_size", 8},
          {"causal", true}};
}

TrainOptions TinyOptions() {
  TrainOptions o;
  o.steps = 80;
  o.batch_size = 8;
  o.seq_len = 32;
  o.lr = 3e-3;
  o.warmup_steps = 5;
  o.weight_decay = 0.01;
  o.val_every = 0;
  o.val_windows = 16;
  o.checkpoint_every = 0;
  o.seed = 1;
  return o;
}

TextDataset Data() { return *TextDataset::FromText(Corpus(), 0.1); }

struct Recorder : TrainObserver {
  void OnStep(const StepReport& r) override { steps.push_back(r); }
  void OnValidation(int64_t step, double loss) override { validations.emplace_back(step, loss); }
  void OnCheckpoint(int64_t step, const std::string& path) override {
    checkpoints.emplace_back(step, path);
  }
  std::vector<StepReport> steps;
  std::vector<std::pair<int64_t, double>> validations;
  std::vector<std::pair<int64_t, std::string>> checkpoints;
};

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("performer_trainer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { ::performer::testing::RemoveTree(dir_); }
  fs::path dir_;
};

TEST_F(TrainerTest, LossGoesDownOnASmallText) {
  TrainOptions o = TinyOptions();
  o.val_every = 40;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(TinyModel(), o, Data());
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const double val_before = (*trainer)->ValidationLoss();
  EXPECT_NEAR(val_before, std::log(256.0), 1.0);  // about uniform over bytes at the start
  Recorder recorder;
  ASSERT_TRUE((*trainer)->Run(&recorder).ok());
  ASSERT_EQ(recorder.steps.size(), 80u);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += recorder.steps[i].loss / 5;
    last += recorder.steps[75 + i].loss / 5;
  }
  EXPECT_GT(first, 4.5);
  EXPECT_LT(last, 3.0) << "first " << first;
  ASSERT_EQ(recorder.validations.size(), 2u);  // steps 40 and 80
  EXPECT_EQ(recorder.validations[1].first, 80);
  EXPECT_LT(recorder.validations[1].second, val_before - 2.0);
  EXPECT_LT(recorder.validations[1].second, recorder.validations[0].second);
  // Warm-up then cosine: the reported rates follow the schedule.
  EXPECT_DOUBLE_EQ(recorder.steps[0].lr, o.Schedule().At(0));
  EXPECT_DOUBLE_EQ(recorder.steps[4].lr, 3e-3);
  EXPECT_DOUBLE_EQ(recorder.steps[79].lr, o.Schedule().At(79));
  EXPECT_EQ(recorder.steps[0].tokens, 8 * 32);
  EXPECT_GT(recorder.steps[0].grad_norm, 0.0);
}

TEST_F(TrainerTest, ResumedRunReproducesTheUninterruptedLossCurve) {
  // Dropout and frequent redraws: the curve depends on every piece of state.
  nlohmann::json model = TinyModel();
  model["emb_dropout"] = 0.1;
  model["ff_dropout"] = 0.1;
  model["attn_dropout"] = 0.1;
  model["feature_redraw_interval"] = 2;
  TrainOptions o = TinyOptions();
  o.steps = 12;
  o.batch_size = 4;
  o.seq_len = 16;
  o.warmup_steps = 3;
  o.val_every = 4;
  o.clip_norm = 0.5;

  Recorder whole;
  auto uninterrupted = Trainer::Create(model, o, Data());
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  ASSERT_TRUE((*uninterrupted)->Run(&whole).ok());

  const std::string checkpoint = CheckpointPath(dir_.string(), 5);
  Recorder first_part, second_part;
  {
    auto interrupted = Trainer::Create(model, o, Data());
    ASSERT_TRUE(interrupted.ok());
    for (int i = 0; i < 5; ++i) first_part.OnStep((*interrupted)->Step());
    ASSERT_TRUE((*interrupted)->SaveCheckpoint(checkpoint).ok());
  }
  // Something else uses the default generator in between.
  torch::manual_seed(12345);
  torch::randn({100});
  auto resumed = Trainer::Resume(checkpoint, o, Data());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 5);
  ASSERT_TRUE((*resumed)->Run(&second_part).ok());

  std::vector<StepReport> joined = first_part.steps;
  joined.insert(joined.end(), second_part.steps.begin(), second_part.steps.end());
  ASSERT_EQ(joined.size(), whole.steps.size());
  int redraws = 0;
  for (size_t i = 0; i < joined.size(); ++i) {
    EXPECT_EQ(joined[i].step, whole.steps[i].step);
    EXPECT_EQ(joined[i].loss, whole.steps[i].loss) << "step " << i + 1;
    EXPECT_EQ(joined[i].grad_norm, whole.steps[i].grad_norm) << "step " << i + 1;
    EXPECT_EQ(joined[i].redrew, whole.steps[i].redrew) << "step " << i + 1;
    redraws += whole.steps[i].redrew;
  }
  EXPECT_EQ(redraws, 4);  // before steps 3, 6, 9, 12
  // Validation at 8 and 12 after the resume, at 4, 8, 12 in the whole run.
  ASSERT_EQ(whole.validations.size(), 3u);
  ASSERT_EQ(second_part.validations.size(), 2u);
  EXPECT_EQ(second_part.validations[0], whole.validations[1]);
  EXPECT_EQ(second_part.validations[1], whole.validations[2]);
  auto a = (*uninterrupted)->model()->named_parameters();
  auto b = (*resumed)->model()->named_parameters();
  for (const auto& item : a) EXPECT_TRUE(torch::equal(item.value(), b[item.key()])) << item.key();
  auto ab = (*uninterrupted)->model()->named_buffers();
  auto bb = (*resumed)->model()->named_buffers();
  for (const auto& item : ab) EXPECT_TRUE(torch::equal(item.value(), bb[item.key()])) << item.key();
}

TEST_F(TrainerTest, RunWritesResumableCheckpointsAtItsCadence) {
  TrainOptions o = TinyOptions();
  o.steps = 7;
  o.checkpoint_every = 3;
  o.checkpoint_dir = (dir_ / "ckpt").string();
  auto trainer = Trainer::Create(TinyModel(), o, Data());
  ASSERT_TRUE(trainer.ok());
  Recorder recorder;
  ASSERT_TRUE((*trainer)->Run(&recorder).ok());
  ASSERT_EQ(recorder.checkpoints.size(), 3u);  // 3, 6 and the last, 7
  EXPECT_EQ(recorder.checkpoints[2].first, 7);
  absl::StatusOr<std::string> latest = ResolveCheckpoint(o.checkpoint_dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, CheckpointPath(o.checkpoint_dir, 7));
  absl::StatusOr<TrainingState> state = ReadTrainingState(*latest);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->step, 7);
  EXPECT_EQ(state->model_config["model_class"], "PerformerLM");
  EXPECT_EQ(state->sampler_batches, 7);
  // Going on from step 6 with more steps works and extends the run.
  TrainOptions longer = o;
  longer.steps = 9;
  auto resumed = Trainer::Resume(CheckpointPath(o.checkpoint_dir, 6), longer, Data());
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_TRUE((*resumed)->Run(nullptr).ok());
  EXPECT_EQ((*resumed)->step(), 9);
}

TEST_F(TrainerTest, ResumeRefusesOtherDataOrOptions) {
  TrainOptions o = TinyOptions();
  o.steps = 2;
  auto trainer = Trainer::Create(TinyModel(), o, Data());
  ASSERT_TRUE(trainer.ok());
  (*trainer)->Step();
  const std::string path = (dir_ / "c.pt").string();
  ASSERT_TRUE((*trainer)->SaveCheckpoint(path).ok());
  EXPECT_TRUE(Trainer::Resume(path, o, Data()).ok());
  auto other_data = Trainer::Resume(path, o, *TextDataset::FromText(Corpus(), 0.2));
  EXPECT_EQ(other_data.status().code(), absl::StatusCode::kInvalidArgument);
  TrainOptions other = o;
  other.lr = 1e-2;
  auto other_lr = Trainer::Resume(path, other, Data());
  ASSERT_FALSE(other_lr.ok());
  EXPECT_NE(other_lr.status().message().find("lr"), std::string::npos);
  std::ofstream(dir_ / "junk.pt") << "not a checkpoint";
  EXPECT_FALSE(Trainer::Resume((dir_ / "junk.pt").string(), o, Data()).ok());
  EXPECT_EQ(ResolveCheckpoint((dir_ / "nothing").string()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TrainerTest, ValidationAndOtherGeneratorUsersDoNotChangeTheCurve) {
  TrainOptions o = TinyOptions();
  o.steps = 6;
  nlohmann::json model = TinyModel();
  model["ff_dropout"] = 0.2;
  auto quiet = Trainer::Create(model, o, Data());
  o.val_every = 1;
  auto validating = Trainer::Create(model, o, Data());
  ASSERT_TRUE(quiet.ok() && validating.ok());
  torch::manual_seed(7);
  torch::Tensor expected = torch::randn({4});
  torch::manual_seed(7);
  for (int i = 0; i < 6; ++i) {
    const double a = (*quiet)->Step().loss;
    (*validating)->ValidationLoss();
    const double b = (*validating)->Step().loss;
    EXPECT_EQ(a, b) << i;
  }
  // The process's default generator is where it was before the steps.
  EXPECT_TRUE(torch::equal(torch::randn({4}), expected));
}

TEST_F(TrainerTest, ExportedFolderLoadsAndReproducesTheTrainerLogits) {
  TrainOptions o = TinyOptions();
  o.steps = 4;
  auto trainer = Trainer::Create(TinyModel(), o, Data());
  ASSERT_TRUE(trainer.ok());
  ASSERT_TRUE((*trainer)->Run(nullptr).ok());
  const std::string out = (dir_ / "model").string();
  absl::StatusOr<models::LoadedModel> exported = (*trainer)->Export(out);
  ASSERT_TRUE(exported.ok()) << exported.status();

  // What the server does: load the folder.
  absl::StatusOr<models::LoadedModel> loaded = models::LoadModelFolder(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->model_class, models::ModelClass::kPerformerLM);
  nlohmann::json tokenizer = nlohmann::json::parse(std::ifstream(fs::path(out) / "tokenizer.json"));
  EXPECT_EQ(tokenizer, nlohmann::json({{"type", "byte"}}));
  torch::Tensor tokens = Data().validation().narrow(0, 0, 40).view({2, 20});
  torch::NoGradGuard no_grad;
  models::PerformerLM model = (*trainer)->model();
  model->eval();
  torch::Tensor expected = model(tokens);
  torch::Tensor logits = loaded->lm(tokens);
  EXPECT_LE((logits - expected).abs().max().item<double>(), 1e-6);
  // The projection matrices are the trainer's, and stay fixed in the loaded model.
  auto weights = io::LoadSafetensors((fs::path(out) / "weights.safetensors").string());
  ASSERT_TRUE(weights.ok());
  auto buffers = model->named_buffers();
  const std::string projection = "performer.net.layers.1.0.fn.fast_attention.projection_matrix";
  EXPECT_TRUE(torch::equal(weights->at(projection), buffers[projection]));
  EXPECT_TRUE(torch::equal(loaded->lm(tokens), logits));

  // Half precision: loads (converted to float32) with rounding-level differences.
  const std::string half = (dir_ / "half").string();
  ASSERT_TRUE((*trainer)->Export(half, torch::kBFloat16).ok());
  auto loaded_half = models::LoadModelFolder(half);
  ASSERT_TRUE(loaded_half.ok()) << loaded_half.status();
  const double diff = (loaded_half->lm(tokens) - expected).abs().max().item<double>();
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 0.25);
  EXPECT_FALSE((*trainer)->Export((dir_ / "double").string(), torch::kDouble).ok());
}

TEST_F(TrainerTest, CreateRejectsModelsItCannotTrain) {
  const TrainOptions o = TinyOptions();
  nlohmann::json model = TinyModel();
  model["causal"] = false;
  EXPECT_FALSE(Trainer::Create(model, o, Data()).ok());
  model = TinyModel();
  model["num_tokens"] = 300;
  EXPECT_FALSE(Trainer::Create(model, o, Data()).ok());
  model = TinyModel();
  model["max_seq_len"] = 16;  // < seq_len 32
  EXPECT_FALSE(Trainer::Create(model, o, Data()).ok());
  model = TinyModel();
  model["dimm"] = 3;
  EXPECT_FALSE(Trainer::Create(model, o, Data()).ok());
  EXPECT_FALSE(Trainer::Create(TinyModel(), o, *TextDataset::FromText("too short", 0.0)).ok());
}

}  // namespace
}  // namespace performer::training
