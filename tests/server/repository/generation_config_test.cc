#include "server/repository/generation_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/remove_tree.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;

class GenerationConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("performer_generation_config_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { ::performer::testing::RemoveTree(dir_); }

  void Write(const std::string& text) { std::ofstream(dir_ / "generation_config.json") << text; }

  fs::path dir_;
};

TEST_F(GenerationConfigTest, AbsentFileGivesDefaults) {
  absl::StatusOr<GenerationConfig> c = LoadGenerationConfig(dir_.string());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->eos_token_id.has_value());
  EXPECT_EQ(c->max_new_tokens, 16);
  EXPECT_TRUE(ValidateGenerationConfig(*c, 10, dir_.string()).ok());
}

// An eos_token_id outside the vocabulary once loaded as "ready" and made
// every request fail; the model folder is now refused with the reason.
TEST_F(GenerationConfigTest, TokenIdsOutsideTheVocabularyAreRefused) {
  for (const char* key :
       {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"}) {
    Write(std::string("{\"") + key + "\": 100}");
    absl::StatusOr<GenerationConfig> c = LoadGenerationConfig(dir_.string());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(ValidateGenerationConfig(*c, 101, dir_.string()).ok()) << key;
    absl::Status s = ValidateGenerationConfig(*c, 100, dir_.string());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_NE(s.message().find((dir_ / "generation_config.json").string()), std::string::npos) << s;
    EXPECT_NE(s.message().find(std::string("\"") + key +
                               "\" is 100, outside the model's vocabulary of 100 tokens"),
              std::string::npos)
        << s;
  }
  Write(R"({"top_k": 50})");
  absl::StatusOr<GenerationConfig> c = LoadGenerationConfig(dir_.string());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(ValidateGenerationConfig(*c, 50, dir_.string()).ok());
  EXPECT_NE(ValidateGenerationConfig(*c, 49, dir_.string()).message().find("\"top_k\" is 50"),
            std::string::npos);
}

TEST_F(GenerationConfigTest, BadValuesNameTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"eos_token_id": -1})", "\"eos_token_id\" must be a non-negative integer"},
      {R"({"temperature": 1e300})", "\"temperature\" must be a number >= 0 (at most 3.4e38)"},
      {R"({"repetition_penalty": 1e39})", "\"repetition_penalty\" must be a positive number"},
      {R"({"top_p": 1.5})", "\"top_p\" must be in (0, 1]"},
      {R"({"max_new_tokens": 0})", "\"max_new_tokens\" must be an integer >= 1"},
      {R"({"colour": 1})", "\"colour\" is not a known key"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"eos_token_id": )", "not valid JSON"},
  };
  for (const auto& [text, expected] : cases) {
    Write(text);
    absl::Status s = LoadGenerationConfig(dir_.string()).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(expected), std::string::npos) << text << ": " << s;
  }
}

TEST_F(GenerationConfigTest, NonRegularFileIsRefused) {
  ASSERT_EQ(mkfifo((dir_ / "generation_config.json").c_str(), 0600), 0);
  absl::Status s = LoadGenerationConfig(dir_.string()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("is a FIFO, not a regular file"), std::string::npos) << s;
}

}  // namespace
}  // namespace performer::server
