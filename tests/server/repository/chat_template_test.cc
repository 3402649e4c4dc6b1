#include "server/repository/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testing/remove_tree.h"

namespace performer::server {
namespace {

namespace fs = std::filesystem;

class ChatTemplateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("performer_chat_template_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { ::performer::testing::RemoveTree(dir_); }

  void Write(const std::string& text) { std::ofstream(dir_ / "chat_template.json") << text; }

  fs::path dir_;
};

TEST_F(ChatTemplateTest, AbsentFileIsNoTemplate) {
  absl::StatusOr<std::optional<ChatTemplate>> chat = LoadChatTemplate(dir_.string());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_FALSE(chat->has_value());
}

TEST_F(ChatTemplateTest, RendersEveryMessageThenTheGenerationPrompt) {
  Write(R"({"system": "[{content}]\n", "user": "Q:\t{content}\n", "assistant": "A:\t{content}\n",
            "generation_prompt": "A:\t", "stop": ["\n"]})");
  absl::StatusOr<std::optional<ChatTemplate>> chat = LoadChatTemplate(dir_.string());
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_TRUE(chat->has_value());
  EXPECT_EQ((*chat)->stop, std::vector<std::string>{"\n"});
  absl::StatusOr<std::string> prompt = (*chat)->Render(
      {{"developer", "Be brief."}, {"user", "Why?"}, {"assistant", "Because."}, {"user", "Who?"}});
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  EXPECT_EQ(*prompt, "[Be brief.]\nQ:\tWhy?\nA:\tBecause.\nQ:\tWho?\nA:\t");
}

TEST_F(ChatTemplateTest, AfterAssistantSkipsWhatTheModelAlreadyGenerated) {
  Write(R"({"user": "Q: {content}\n", "assistant": "A: {content}\n\n"})");
  absl::StatusOr<std::optional<ChatTemplate>> chat = LoadChatTemplate(dir_.string());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ((*chat)->AfterAssistant(""), "\n\n");
  EXPECT_EQ((*chat)->AfterAssistant("\n"), "\n");
  EXPECT_EQ((*chat)->AfterAssistant("xyz"), "\n\n");
}

TEST_F(ChatTemplateTest, RoleWithoutPatternIsRefusedNamingTheMessage) {
  Write(R"({"user": "{content}"})");
  absl::StatusOr<std::optional<ChatTemplate>> chat = LoadChatTemplate(dir_.string());
  ASSERT_TRUE(chat.ok()) << chat.status();
  absl::StatusOr<std::string> prompt = (*chat)->Render({{"user", "a"}, {"tool", "b"}});
  EXPECT_EQ(prompt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(prompt.status().message().find("messages[1].role"), std::string::npos)
      << prompt.status();
}

TEST_F(ChatTemplateTest, MalformedFilesAreRefusedNamingTheKey) {
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {R"({"user": "no placeholder"})", "\"user\""},
           {R"({"user": "{content}{content}"})", "\"user\""},
           {R"({"user": "{content}", "tool": "{content}"})", "\"tool\""},
           {R"({"user": "{content}", "stop": ["a", "b", "c", "d", "e"]})", "\"stop\""},
           {R"({"user": "{content}", "stop": [""]})", "\"stop\""},
           {R"({"system": "{content}"})", "\"user\""},
           {R"({"user": 3})", "\"user\""},
           {R"([1])", "not a JSON object"}}) {
    Write(text);
    absl::StatusOr<std::optional<ChatTemplate>> chat = LoadChatTemplate(dir_.string());
    ASSERT_FALSE(chat.ok()) << text;
    EXPECT_EQ(chat.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(chat.status().message().find(key), std::string::npos) << chat.status();
  }
}

}  // namespace
}  // namespace performer::server
