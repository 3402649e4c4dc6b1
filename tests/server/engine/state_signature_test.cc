// The deployment's MAC on exported states: a signed state verifies under its
// key only; unsigned, altered or otherwise-keyed bytes are refused with a
// key; without a key a signature is dropped unchecked.
#include "server/engine/state_signature.h"

#include <gtest/gtest.h>

#include <string>

namespace performer::server {
namespace {

const std::string kKey(32, 'k');
const std::string kState = "PFSTATE some encoded state bytes";

TEST(StateSignatureTest, ASignedStateVerifiesUnderItsKeyOnly) {
  const std::string signed_state = SignState(kKey, kState);
  EXPECT_EQ(signed_state.size(), kState.size() + kSignatureBytes);
  absl::StatusOr<std::string_view> verified = VerifyState(kKey, signed_state);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(*verified, kState);
  const absl::Status other = VerifyState(std::string(32, 'j'), signed_state).status();
  EXPECT_EQ(other.code(), absl::StatusCode::kInvalidArgument) << other;
  EXPECT_NE(other.message().find("not this deployment's"), std::string::npos) << other;
}

TEST(StateSignatureTest, AlteredOrUnsignedBytesAreRefused) {
  const std::string signed_state = SignState(kKey, kState);
  for (size_t i = 0; i < signed_state.size(); ++i) {
    std::string altered = signed_state;
    altered[i] ^= 0x20;
    EXPECT_FALSE(VerifyState(kKey, altered).ok()) << "byte " << i;
  }
  const absl::Status unsigned_state = VerifyState(kKey, kState).status();
  EXPECT_EQ(unsigned_state.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unsigned_state.message().find("not signed"), std::string::npos) << unsigned_state;
  EXPECT_FALSE(VerifyState(kKey, "").ok());
}

TEST(StateSignatureTest, WithoutAKeyNothingIsSignedOrChecked) {
  EXPECT_EQ(SignState("", kState), kState);
  EXPECT_EQ(*VerifyState("", kState), kState);
  EXPECT_EQ(*VerifyState("", SignState(kKey, kState)), kState);
}

}  // namespace
}  // namespace performer::server
