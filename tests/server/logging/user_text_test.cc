#include "server/logging/user_text.h"

#include <gtest/gtest.h>

#include <string>

namespace performer::server {
namespace {

TEST(BoundUserTextTest, ShortTextIsKeptWhole) {
  EXPECT_EQ(BoundUserText("model-a"), "model-a");
  EXPECT_EQ(BoundUserText(std::string(kMaxQuotedUserBytes, 'x')),
            std::string(kMaxQuotedUserBytes, 'x'));
}

TEST(BoundUserTextTest, LongTextIsCutAndSaysItsLength) {
  const std::string long_text(100 * 1024, 'x');
  const std::string bounded = BoundUserText(long_text);
  EXPECT_EQ(bounded, std::string(kMaxQuotedUserBytes, 'x') + "... (102400 bytes)");
}

TEST(BoundUserTextTest, NeverSplitsACharacter) {
  // "é" is two bytes: a cut after 3 bytes of "aéé" keeps "aé".
  const std::string text = "a\xC3\xA9\xC3\xA9";
  EXPECT_EQ(BoundUserText(text, 4), "a\xC3\xA9... (5 bytes)");
  EXPECT_EQ(BoundUserText(text, 3), "a\xC3\xA9... (5 bytes)");
  EXPECT_EQ(BoundUserText(text, 2), "a... (5 bytes)");
}

}  // namespace
}  // namespace performer::server
