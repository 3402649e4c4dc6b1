#include "server/engine/text_output.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

namespace performer::server {
namespace {

struct TextRun {
  std::vector<std::string> pieces;  // released after each token
  std::string text;
  int stopped_at = -1;
};

TextRun Feed(const std::string& input, std::vector<std::string> stops) {
  std::unique_ptr<Tokenizer> bytes = MakeByteTokenizer();
  TextOutput out(*bytes, std::move(stops));
  TextRun run;
  for (size_t i = 0; i < input.size(); ++i) {
    bool stopped = false;
    run.pieces.push_back(out.Push(static_cast<unsigned char>(input[i]), &stopped));
    run.text += run.pieces.back();
    if (stopped) {
      run.stopped_at = static_cast<int>(i);
      return run;
    }
  }
  run.text += out.Flush();
  return run;
}

TEST(TextOutputTest, StopStringAcrossTokensEndsWithIt) {
  TextRun run = Feed("hello world", {"lo w"});
  EXPECT_EQ(run.stopped_at, 6);
  EXPECT_EQ(run.text, "hello w");
}

TEST(TextOutputTest, HoldsBackAPossibleStopPrefixOnly) {
  TextRun run = Feed("abcab", {"abd"});
  // "ab" could start "abd": held back, then released at the end.
  EXPECT_EQ(run.pieces, (std::vector<std::string>{"", "", "abc", "", ""}));
  EXPECT_EQ(run.text, "abcab");
  EXPECT_EQ(run.stopped_at, -1);
}

TEST(TextOutputTest, EarliestStopWinsAndNothingAfterIt) {
  TextRun run = Feed("xxabcd", {"bcd", "ab"});
  EXPECT_EQ(run.stopped_at, 3);
  EXPECT_EQ(run.text, "xxab");
}

TEST(TextOutputTest, SplitUtf8IsNotReleasedEarly) {
  TextRun run = Feed("a\xe2\x82\xac", {});
  EXPECT_EQ(run.pieces, (std::vector<std::string>{"a", "", "", "\xe2\x82\xac"}));
}

TEST(TextOutputTest, StopStringWithMultibyteCharacter) {
  TextRun run = Feed("price: 5\xe2\x82\xac and more", {"\xe2\x82\xac"});
  EXPECT_EQ(run.text, "price: 5\xe2\x82\xac");
}

}  // namespace
}  // namespace performer::server
