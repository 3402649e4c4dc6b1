// ValidateGenerationRequest: the bounds of RequestBounds, and limits at the
// edges of int64 (the request_validation fuzzer's finds).
#include "server/engine/generation_request.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

namespace performer::server {
namespace {

RequestLimits Limits() {
  RequestLimits limits;
  limits.model_name = "m";
  limits.vocab_size = 100;
  limits.max_seq_len = 64;
  limits.has_tokenizer = true;
  limits.bounds.max_request_id_bytes = 8;
  limits.bounds.max_stop_strings = 2;
  limits.bounds.max_stop_string_bytes = 4;
  limits.bounds.max_stop_token_ids = 3;
  limits.bounds.max_new_tokens = 32;
  return limits;
}

GenerationRequest Request() {
  GenerationRequest r;
  r.request_id = "r1";
  r.prompt = {1, 2, 3};
  r.sampling.max_new_tokens = 8;
  return r;
}

TEST(ValidateGenerationRequestTest, AcceptsARequestWithinEveryBound) {
  GenerationRequest r = Request();
  r.sampling.stop_strings = {"ab", "cd"};
  r.sampling.stop_token_ids = {4, 5, 6};
  EXPECT_TRUE(ValidateGenerationRequest(r, Limits()).ok());
}

TEST(ValidateGenerationRequestTest, RefusesWhatPassesABoundNamingIt) {
  GenerationRequest long_id = Request();
  long_id.request_id = std::string(9, 'x');
  absl::Status s = ValidateGenerationRequest(long_id, Limits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("request_id"), std::string::npos) << s;

  GenerationRequest many_stops = Request();
  many_stops.sampling.stop_strings = {"a", "b", "c"};
  s = ValidateGenerationRequest(many_stops, Limits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stop_strings"), std::string::npos) << s;

  GenerationRequest long_stop = Request();
  long_stop.sampling.stop_strings = {"abcde"};
  s = ValidateGenerationRequest(long_stop, Limits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stop_strings"), std::string::npos) << s;

  GenerationRequest many_stop_tokens = Request();
  many_stop_tokens.sampling.stop_token_ids = {4, 5, 6, 7};
  s = ValidateGenerationRequest(many_stop_tokens, Limits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("stop_token_ids: 4 ids; this server takes at most 3"),
            std::string::npos)
      << s;

  GenerationRequest too_many_new = Request();
  too_many_new.sampling.max_new_tokens = 33;
  s = ValidateGenerationRequest(too_many_new, Limits());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_new_tokens"), std::string::npos) << s;
}

// The sequence-length check once computed max_seq_len - prompt length for
// its message: with a max_seq_len of INT64_MIN that overflowed (undefined
// behaviour, found by the fuzzer; seed crash_max_seq_len_overflow).
TEST(ValidateGenerationRequestTest, ExtremeLimitsAreRefusedWithoutOverflow) {
  RequestLimits limits = Limits();
  limits.max_seq_len = std::numeric_limits<int64_t>::min();
  absl::Status s = ValidateGenerationRequest(Request(), limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 0 new tokens fit"), std::string::npos) << s;

  limits = Limits();
  limits.bounds.max_new_tokens = std::numeric_limits<int64_t>::max();
  GenerationRequest r = Request();
  r.sampling.max_new_tokens = std::numeric_limits<int64_t>::max();
  s = ValidateGenerationRequest(r, limits);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("at most 61 new tokens fit"), std::string::npos) << s;
}

}  // namespace
}  // namespace performer::server
