#include "core/training/text_dataset.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/training/window_sampler.h"
#include "tests/testing/remove_tree.h"

namespace performer::training {
namespace {

std::string Text(int64_t n) {
  std::string text;
  for (int64_t i = 0; i < n; ++i) text.push_back(static_cast<char>((i * 7) % 256));
  return text;
}

std::string Decode(const torch::Tensor& tokens) {
  std::string s;
  for (int64_t i = 0; i < tokens.size(0); ++i)
    s.push_back(static_cast<char>(tokens[i].item<int64_t>()));
  return s;
}

TEST(TextDatasetTest, SplitsTheTailOffAsValidation) {
  const std::string text = Text(1000);
  absl::StatusOr<TextDataset> data = TextDataset::FromText(text, 0.1);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train().size(0), 900);
  EXPECT_EQ(data->validation().size(0), 100);
  EXPECT_EQ(data->train().scalar_type(), torch::kLong);
  EXPECT_EQ(Decode(data->train()), text.substr(0, 900));
  EXPECT_EQ(Decode(data->validation()), text.substr(900));
  // Bytes >= 128 are tokens 128..255, not negative chars.
  EXPECT_EQ(data->train().max().item<int64_t>(), 255);
  EXPECT_EQ(data->train().min().item<int64_t>(), 0);
}

TEST(TextDatasetTest, FingerprintCoversTextAndSplit) {
  const std::string text = Text(1000);
  const uint64_t a = TextDataset::FromText(text, 0.1)->fingerprint();
  EXPECT_EQ(a, TextDataset::FromText(text, 0.1)->fingerprint());
  EXPECT_NE(a, TextDataset::FromText(text, 0.2)->fingerprint());
  std::string other = text;
  other[500] ^= 1;
  EXPECT_NE(a, TextDataset::FromText(other, 0.1)->fingerprint());
}

TEST(TextDatasetTest, ValidationWindowsAreFixedSpreadAndDisjoint) {
  const std::string text = Text(1000);
  TextDataset data = *TextDataset::FromText(text, 0.5);  // 500 validation tokens
  torch::Tensor w = data.ValidationWindows(40, 5);
  ASSERT_EQ(w.sizes(), (std::vector<int64_t>{5, 40}));
  EXPECT_TRUE(torch::equal(w, data.ValidationWindows(40, 5)));
  const std::string val = text.substr(500);
  // Starts 0, 115, 230, 345, 460: the first at the start, the last at the end.
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(Decode(w[i]), val.substr(i * 115, 40)) << i;
  // At most n_val / length windows.
  EXPECT_EQ(data.ValidationWindows(100, 50).size(0), 5);
  EXPECT_EQ(data.ValidationWindows(501, 5).size(0), 0);
  EXPECT_EQ(TextDataset::FromText(text, 0.0)->ValidationWindows(10, 5).size(0), 0);
}

TEST(TextDatasetTest, ConcatenatesFilesAndNamesAMissingOne) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("performer_dataset_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.txt") << "hello ";
  std::ofstream(dir / "b.txt") << "world";
  absl::StatusOr<TextDataset> data =
      TextDataset::FromFiles({(dir / "a.txt").string(), (dir / "b.txt").string()}, 0.0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(Decode(data->train()), "hello world");
  absl::StatusOr<TextDataset> missing = TextDataset::FromFiles({(dir / "c.txt").string()}, 0.0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("c.txt"), std::string::npos);
  ::performer::testing::RemoveTree(dir);
}

TEST(TextDatasetTest, RejectsEmptyCorpusAndBadFractions) {
  EXPECT_FALSE(TextDataset::FromText("", 0.1).ok());
  EXPECT_FALSE(TextDataset::FromText("abc", 1.0).ok());
  EXPECT_FALSE(TextDataset::FromText("abc", -0.1).ok());
  EXPECT_FALSE(TextDataset::FromText("a", 0.6).ok());  // nothing left to train on
}

TEST(TrainWindowSamplerTest, DrawsContiguousWindowsDeterministically) {
  torch::Tensor tokens = torch::arange(1000, torch::kLong);
  WindowSampler a(tokens, 5), b(tokens, 5), c(tokens, 6);
  torch::Tensor wa = a.Next(8, 33);
  ASSERT_EQ(wa.sizes(), (std::vector<int64_t>{8, 33}));
  // Each row is a slice: consecutive values inside the sequence.
  EXPECT_TRUE(torch::equal(wa - wa.narrow(1, 0, 1), torch::arange(33).expand({8, 33})));
  EXPECT_GE(wa.min().item<int64_t>(), 0);
  EXPECT_LT(wa.max().item<int64_t>(), 1000);
  EXPECT_TRUE(torch::equal(wa, b.Next(8, 33)));
  EXPECT_FALSE(torch::equal(wa, c.Next(8, 33)));
  EXPECT_FALSE(torch::equal(a.Next(8, 33), wa));  // the stream moves on
  EXPECT_EQ(a.batches_drawn(), 2);
}

TEST(TrainWindowSamplerTest, RestoredStateContinuesTheStream) {
  torch::Tensor tokens = torch::arange(500, torch::kLong);
  WindowSampler a(tokens, 11);
  a.Next(4, 10);
  torch::Tensor state = a.GeneratorState();
  const int64_t drawn = a.batches_drawn();
  torch::Tensor next = a.Next(4, 10);
  WindowSampler b(tokens, 99);
  b.Restore(state, drawn);
  EXPECT_TRUE(torch::equal(b.Next(4, 10), next));
  EXPECT_EQ(b.batches_drawn(), 2);
}

TEST(TrainWindowSamplerTest, WholeSequenceWindowAndTooLongWindow) {
  torch::Tensor tokens = torch::arange(10, torch::kLong);
  WindowSampler a(tokens, 1);
  EXPECT_TRUE(torch::equal(a.Next(2, 10), torch::arange(10).expand({2, 10})));
  EXPECT_THROW(a.Next(1, 11), c10::Error);
}

}  // namespace
}  // namespace performer::training
