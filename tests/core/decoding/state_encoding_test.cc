// The exported-state bytes: a round trip is exact; any corruption, a cut, an
// unknown version or a malformed length is INVALID_ARGUMENT; a state of
// another model is FAILED_PRECONDITION. Nothing is allocated from an
// unchecked length.
#include "core/decoding/state_encoding.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <limits>
#include <string>

namespace performer::decoding {
namespace {

ModelFingerprint Model() { return {"lm", "c0ffee", "beef"}; }

EncodedState Sample() {
  torch::manual_seed(1);
  EncodedState state;
  state.snapshot.position = 4;
  state.snapshot.layers = {{torch::randn({2, 3}), torch::randn({2})}, {}, {torch::randn({4})}};
  state.tokens = {5, 1, 2, 9, 7};
  return state;
}

TEST(StateEncodingTest, RoundTripIsExact) {
  const EncodedState state = Sample();
  absl::StatusOr<std::string> bytes = EncodeState(Model(), state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<EncodedState> back = DecodeState(*bytes, Model(), 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->snapshot.position, 4);
  EXPECT_EQ(back->tokens, state.tokens);
  ASSERT_EQ(back->snapshot.layers.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(back->snapshot.layers[i].size(), state.snapshot.layers[i].size());
    for (size_t j = 0; j < state.snapshot.layers[i].size(); ++j) {
      EXPECT_TRUE(torch::equal(back->snapshot.layers[i][j], state.snapshot.layers[i][j]));
    }
  }
}

// The checksum is not a key: a state with a valid checksum but NaNs or
// infinities is refused rather than decoded into garbage tokens.
TEST(StateEncodingTest, NonFiniteValuesAreRefused) {
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity()}) {
    EncodedState state = Sample();
    state.snapshot.layers[2][0][1] = bad;
    absl::StatusOr<std::string> bytes = EncodeState(Model(), state);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const absl::Status status = DecodeState(*bytes, Model(), 1 << 20).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("tensor 0 of layer 2 holds a non-finite value"),
              std::string::npos)
        << status;
  }
}

TEST(StateEncodingTest, EveryFlippedByteAndEveryCutIsRefused) {
  const std::string bytes = *EncodeState(Model(), Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    const absl::Status status = DecodeState(bad, Model(), 1 << 20).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "byte " << i << ": " << status;
  }
  for (size_t length : {size_t{0}, size_t{7}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_EQ(DecodeState(bytes.substr(0, length), Model(), 1 << 20).status().code(),
              absl::StatusCode::kInvalidArgument)
        << length;
  }
  EXPECT_EQ(DecodeState(bytes + "x", Model(), 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StateEncodingTest, AnotherModelIsAFailedPrecondition) {
  const std::string bytes = *EncodeState(Model(), Sample());
  for (ModelFingerprint other :
       {ModelFingerprint{"lm2", "c0ffee", "beef"}, ModelFingerprint{"lm", "c0ffef", "beef"},
        ModelFingerprint{"lm", "c0ffee", "bee5"}}) {
    const absl::Status status = DecodeState(bytes, other, 1 << 20).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("'lm'"), std::string_view::npos) << status;
  }
}

// The state's names are the sender's: the message quotes at most 64 bytes
// of each, escaped, with its length.
TEST(StateEncodingTest, AnotherModelsLongNamesAreQuotedBounded) {
  const std::string name(4096, '\x01');
  const std::string bytes = *EncodeState({name, std::string(4000, 'c'), "beef"}, Sample());
  const absl::Status status = DecodeState(bytes, Model(), 1 << 20).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_LT(status.message().size(), 700u) << status.message().size();
  EXPECT_NE(status.message().find("\\001\\001"), std::string_view::npos) << status;
  EXPECT_NE(status.message().find("... (4096 bytes)"), std::string_view::npos) << status;
  EXPECT_NE(status.message().find("... (4000 bytes)"), std::string_view::npos) << status;
}

// A well-formed checksum over hostile lengths: refused before allocating.
TEST(StateEncodingTest, HostileLengthsWithAValidChecksumAreRefused) {
  EncodedState state;
  state.snapshot.position = 1;
  state.snapshot.layers = {{torch::zeros({1})}};
  state.tokens = {3};
  std::string bytes = *EncodeState(Model(), state);
  // The one tensor's size: 8 bytes before its 4 data bytes and the checksum.
  const size_t size_at = bytes.size() - 8 - 4 - 8;
  auto with_size = [&](int64_t size) {
    std::string b = bytes.substr(0, bytes.size() - 8);
    std::memcpy(&b[size_at], &size, sizeof(size));
    const uint64_t checksum = Fnv1a64(b);
    b.append(reinterpret_cast<const char*>(&checksum), sizeof(checksum));
    return b;
  };
  for (int64_t size : {int64_t{-1}, int64_t{1} << 40, int64_t{1} << 62, int64_t{2}}) {
    const absl::Status status = DecodeState(with_size(size), Model(), 1 << 20).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << size << ": " << status;
  }
  EXPECT_TRUE(DecodeState(with_size(1), Model(), 1 << 20).ok());
  // The data bound holds even for a well-formed state.
  EXPECT_EQ(DecodeState(with_size(1), Model(), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(StateEncodingTest, APositionPastTheTokensIsRefused) {
  EncodedState state = Sample();
  state.snapshot.position = 6;  // 5 tokens seen
  EXPECT_EQ(EncodeState(Model(), state).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace performer::decoding
