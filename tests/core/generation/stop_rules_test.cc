#include "core/generation/stop_rules.h"

#include <gtest/gtest.h>

namespace performer::generation {
namespace {

SamplingParams StopRulesParams() {
  SamplingParams p;
  p.max_new_tokens = 4;
  p.eos_token_id = 2;
  p.stop_token_ids = {5, 2, 7};
  return p;
}

TEST(StopRulesTest, FinishReasonNames) {
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "none");
  EXPECT_EQ(FinishReasonName(FinishReason::kEos), "eos");
  EXPECT_EQ(FinishReasonName(FinishReason::kStopToken), "stop_token");
  EXPECT_EQ(FinishReasonName(FinishReason::kMaxNewTokens), "length");
  EXPECT_EQ(FinishReasonName(FinishReason::kMaxSequenceLength), "max_seq_len");
}

TEST(StopRulesTest, ContinuesOnOrdinaryToken) {
  EXPECT_EQ(CheckStop(StopRulesParams(), 9, 1, 10, 100), FinishReason::kNone);
  EXPECT_EQ(CheckStop(StopRulesParams(), 9, 3, 10, 100), FinishReason::kNone);
}

TEST(StopRulesTest, EosWinsOverStopTokenAndLimits) {
  // Token 2 is both eos and a stop token, and it is the last allowed token at
  // the model's max length: eos is reported.
  EXPECT_EQ(CheckStop(StopRulesParams(), 2, 4, 100, 100), FinishReason::kEos);
}

TEST(StopRulesTest, StopTokenWinsOverLimits) {
  EXPECT_EQ(CheckStop(StopRulesParams(), 7, 1, 10, 100), FinishReason::kStopToken);
  EXPECT_EQ(CheckStop(StopRulesParams(), 5, 4, 100, 100), FinishReason::kStopToken);
}

TEST(StopRulesTest, MaxNewTokensWinsOverMaxSeqLen) {
  EXPECT_EQ(CheckStop(StopRulesParams(), 9, 4, 10, 100), FinishReason::kMaxNewTokens);
  EXPECT_EQ(CheckStop(StopRulesParams(), 9, 4, 100, 100), FinishReason::kMaxNewTokens);
}

TEST(StopRulesTest, MaxSeqLenReached) {
  EXPECT_EQ(CheckStop(StopRulesParams(), 9, 1, 99, 100), FinishReason::kNone);
  EXPECT_EQ(CheckStop(StopRulesParams(), 9, 1, 100, 100), FinishReason::kMaxSequenceLength);
  // No limit when max_seq_len <= 0.
  EXPECT_EQ(CheckStop(StopRulesParams(), 9, 1, 100000, 0), FinishReason::kNone);
}

TEST(StopRulesTest, NoEosConfigured) {
  SamplingParams p = StopRulesParams();
  p.eos_token_id.reset();
  p.stop_token_ids.clear();
  EXPECT_EQ(CheckStop(p, 2, 1, 10, 100), FinishReason::kNone);
}

}  // namespace
}  // namespace performer::generation
