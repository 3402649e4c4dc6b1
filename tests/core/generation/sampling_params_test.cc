#include "core/generation/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "absl/status/status.h"

namespace performer::generation {
namespace {

constexpr int64_t kVocab = 100;

// Expects InvalidArgument whose message mentions `field`.
void ExpectInvalid(const SamplingParams& p, const std::string& field, int64_t vocab = kVocab) {
  absl::Status s = ValidateSamplingParams(p, vocab);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << ": " << s;
  EXPECT_NE(std::string(s.message()).find(field), std::string::npos) << s.message();
}

TEST(SamplingParamsTest, DefaultsAndGreedyAreValid) {
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}, kVocab).ok());
  SamplingParams g = SamplingParams::Greedy();
  EXPECT_EQ(g.temperature, 0.0f);
  EXPECT_EQ(g.top_k, 0);
  EXPECT_EQ(g.top_p, 1.0f);
  EXPECT_TRUE(ValidateSamplingParams(g, kVocab).ok());
}

TEST(SamplingParamsTest, FullyConfiguredIsValid) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = kVocab;
  p.filter_thres = 0.9;
  p.top_p = 0.5f;
  p.repetition_penalty = 1.2f;
  p.seed = 7;
  p.max_new_tokens = 1;
  p.stop_token_ids = {0, kVocab - 1};
  p.eos_token_id = kVocab - 1;
  EXPECT_TRUE(ValidateSamplingParams(p, kVocab).ok());
}

TEST(SamplingParamsTest, RejectsBadTemperature) {
  SamplingParams p;
  p.temperature = -0.5f;
  ExpectInvalid(p, "temperature");
  absl::Status s = ValidateSamplingParams(p, kVocab);
  EXPECT_NE(std::string(s.message()).find("-0.5"), std::string::npos) << s.message();
  p.temperature = std::numeric_limits<float>::infinity();
  ExpectInvalid(p, "temperature");
  p.temperature = std::nanf("");
  ExpectInvalid(p, "temperature");
}

TEST(SamplingParamsTest, RejectsBadTopK) {
  SamplingParams p;
  p.top_k = -1;
  ExpectInvalid(p, "top_k");
  p.top_k = kVocab + 1;
  ExpectInvalid(p, "top_k");
}

TEST(SamplingParamsTest, RejectsBadFilterThres) {
  SamplingParams p;
  p.filter_thres = 1.0;
  ExpectInvalid(p, "filter_thres");
  p.filter_thres = -0.1;
  ExpectInvalid(p, "filter_thres");
  // In range, but int((1 - 0.995) * 100) = 0 tokens kept.
  p.filter_thres = 0.995;
  ExpectInvalid(p, "filter_thres");
  p.filter_thres = 0.0;  // Keeps everything.
  EXPECT_TRUE(ValidateSamplingParams(p, kVocab).ok());
}

TEST(SamplingParamsTest, FilterThresToTopKFormula) {
  // Python: int((1 - 0.9) * 100) == 9 (1 - 0.9 is 0.09999999999999998).
  EXPECT_EQ(FilterThresToTopK(0.9, 100), 9);
  EXPECT_EQ(FilterThresToTopK(0.9, 256), 25);  // int(25.599999999999998)
  EXPECT_EQ(FilterThresToTopK(0.0, 100), 100);
  EXPECT_EQ(FilterThresToTopK(0.5, 3), 1);  // int(1.5)
  EXPECT_EQ(FilterThresToTopK(0.995, 100), 0);
  // A vocabulary near 2^63 rounds up as a double: k is clamped, not
  // converted out of int64's range (undefined; found by the
  // request_validation fuzzer).
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(FilterThresToTopK(0.0, huge), huge);
  EXPECT_TRUE(ValidateSamplingParams(
                  [] {
                    SamplingParams p;
                    p.filter_thres = 0.0;
                    return p;
                  }(),
                  huge)
                  .ok());
}

TEST(SamplingParamsTest, RejectsBadTopP) {
  SamplingParams p;
  p.top_p = 0.0f;
  ExpectInvalid(p, "top_p");
  p.top_p = 1.01f;
  ExpectInvalid(p, "top_p");
  p.top_p = std::nanf("");
  ExpectInvalid(p, "top_p");
}

TEST(SamplingParamsTest, RejectsBadRepetitionPenalty) {
  SamplingParams p;
  p.repetition_penalty = 0.0f;
  ExpectInvalid(p, "repetition_penalty");
  p.repetition_penalty = -1.0f;
  ExpectInvalid(p, "repetition_penalty");
  p.repetition_penalty = 0.5f;  // Accepted, no effect (reference applies only > 1).
  EXPECT_TRUE(ValidateSamplingParams(p, kVocab).ok());
}

TEST(SamplingParamsTest, RejectsBadMaxNewTokens) {
  SamplingParams p;
  p.max_new_tokens = 0;
  ExpectInvalid(p, "max_new_tokens");
}

TEST(SamplingParamsTest, RejectsOutOfVocabStopAndEos) {
  SamplingParams p;
  p.stop_token_ids = {3, kVocab};
  ExpectInvalid(p, "stop_token_ids");
  p.stop_token_ids = {-1};
  ExpectInvalid(p, "stop_token_ids");
  p.stop_token_ids = {};
  p.eos_token_id = kVocab;
  ExpectInvalid(p, "eos_token_id");
  p.eos_token_id = -2;
  ExpectInvalid(p, "eos_token_id");
}

TEST(SamplingParamsTest, RejectsEmptyVocab) { ExpectInvalid(SamplingParams{}, "vocab_size", 0); }

}  // namespace
}  // namespace performer::generation
