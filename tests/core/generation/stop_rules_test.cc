#include "core/generation/stop_rules.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace performer::generation {
namespace {

SamplingParams StopRulesParams() {
  SamplingParams p;
  p.max_new_tokens = 4;
  p.eos_token_id = 2;
  p.stop_token_ids = {5, 2, 7};
  return p;
}

FinishReason Check(int64_t token, int64_t generated_count, int64_t sequence_length,
                   int64_t max_seq_len) {
  const SamplingParams p = StopRulesParams();
  return CheckStop(p, StopTokenSet(p.stop_token_ids), token, generated_count, sequence_length,
                   max_seq_len);
}

TEST(StopTokenSetTest, HoldsExactlyItsIds) {
  const StopTokenSet set({5, 200, 63, 64, 5, -3});
  for (int64_t id = -70; id < 300; ++id) {
    EXPECT_EQ(set.Contains(id), id == 5 || id == 200 || id == 63 || id == 64) << id;
  }
  EXPECT_FALSE(StopTokenSet({}).Contains(0));
  EXPECT_FALSE(set.Contains(int64_t{1} << 40));
}

TEST(StopRulesTest, FinishReasonNames) {
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "none");
  EXPECT_EQ(FinishReasonName(FinishReason::kEos), "eos");
  EXPECT_EQ(FinishReasonName(FinishReason::kStopToken), "stop_token");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kStopString), "stop_string");
  EXPECT_EQ(FinishReasonName(FinishReason::kCancelled), "cancelled");
  EXPECT_EQ(FinishReasonName(FinishReason::kDeadline), "deadline");
  EXPECT_EQ(FinishReasonName(FinishReason::kError), "error");
}

TEST(StopRulesTest, ContinuesOnOrdinaryToken) {
  EXPECT_EQ(Check(9, 1, 10, 100), FinishReason::kNone);
  EXPECT_EQ(Check(9, 3, 10, 100), FinishReason::kNone);
}

TEST(StopRulesTest, EosWinsOverStopTokenAndLimits) {
  // Token 2 is both eos and a stop token, and it is the last allowed token at
  // the model's max length: eos is reported.
  EXPECT_EQ(Check(2, 4, 100, 100), FinishReason::kEos);
}

TEST(StopRulesTest, StopTokenWinsOverLimits) {
  EXPECT_EQ(Check(7, 1, 10, 100), FinishReason::kStopToken);
  EXPECT_EQ(Check(5, 4, 100, 100), FinishReason::kStopToken);
}

TEST(StopRulesTest, MaxNewTokensEndsWithLength) {
  EXPECT_EQ(Check(9, 4, 10, 100), FinishReason::kLength);
  EXPECT_EQ(Check(9, 4, 100, 100), FinishReason::kLength);
}

TEST(StopRulesTest, MaxSeqLenReached) {
  EXPECT_EQ(Check(9, 1, 99, 100), FinishReason::kNone);
  EXPECT_EQ(Check(9, 1, 100, 100), FinishReason::kLength);
  // No limit when max_seq_len <= 0.
  EXPECT_EQ(Check(9, 1, 100000, 0), FinishReason::kNone);
}

TEST(StopRulesTest, NoEosConfigured) {
  SamplingParams p = StopRulesParams();
  p.eos_token_id.reset();
  p.stop_token_ids.clear();
  EXPECT_EQ(CheckStop(p, StopTokenSet(p.stop_token_ids), 2, 1, 10, 100), FinishReason::kNone);
}

std::vector<StopStringMatcher::Match> ScanGrowing(StopStringMatcher& matcher,
                                                  const std::vector<std::string>& pieces) {
  std::vector<StopStringMatcher::Match> out;
  std::string text;
  for (const std::string& piece : pieces) {
    text += piece;
    out.push_back(matcher.Scan(text));
  }
  return out;
}

TEST(StopStringMatcherTest, WithoutStopStringsEverythingIsReleasable) {
  StopStringMatcher matcher({});
  EXPECT_TRUE(matcher.empty());
  const auto m = matcher.Scan("hello");
  EXPECT_FALSE(m.stopped);
  EXPECT_EQ(m.releasable, 5u);
}

TEST(StopStringMatcherTest, HoldsBackAPossibleStartAndStopsAcrossPieces) {
  StopStringMatcher matcher({"END"});
  const auto m = ScanGrowing(matcher, {"abc", "E", "N", "D", "x"});
  EXPECT_EQ(m[0].releasable, 3u);  // "abc"
  EXPECT_EQ(m[1].releasable, 3u);  // "E" may start "END"
  EXPECT_EQ(m[2].releasable, 3u);  // "EN" too
  EXPECT_TRUE(m[3].stopped);
  EXPECT_EQ(m[3].releasable, 6u);  // up to and including "END"
}

TEST(StopStringMatcherTest, ReleasesAHeldPrefixThatDidNotComplete) {
  StopStringMatcher matcher({"END"});
  const auto m = ScanGrowing(matcher, {"E", "x"});
  EXPECT_EQ(m[0].releasable, 0u);
  EXPECT_FALSE(m[1].stopped);
  EXPECT_EQ(m[1].releasable, 2u);
}

TEST(StopStringMatcherTest, EarliestEndingStopStringWins) {
  StopStringMatcher matcher({"bcd", "bc"});
  const auto m = ScanGrowing(matcher, {"abcdef"});
  EXPECT_TRUE(m[0].stopped);
  EXPECT_EQ(m[0].releasable, 3u);  // "abc"
}

}  // namespace
}  // namespace performer::generation
