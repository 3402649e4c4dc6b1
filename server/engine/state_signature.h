// A deployment's keyed MAC on exported states. The state encoding's checksum
// (core/decoding/state_encoding.h) finds corruption, not forgery: anyone can
// compute it. With a signing key (--state_signing_key_file, the same on
// every replica), every state this deployment writes (ExportSession,
// TakeSession, the spill folder) carries an HMAC-SHA256 of its bytes under
// that key, and only states that carry a valid one are read back, so a
// client can import only what this deployment exported.
//
// Signed bytes: the encoded state, then kSignatureMagic (8 bytes), then the
// 32-byte HMAC-SHA256 of the encoded state.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace performer::server {

inline constexpr char kSignatureMagic[] = "PFSIG001";
inline constexpr size_t kSignatureBytes = 8 + 32;
// A key shorter than this is refused: HMAC-SHA256 wants 256 bits.
inline constexpr size_t kMinSigningKeyBytes = 32;

// `encoded` with the signature appended; unchanged where `key` is empty.
std::string SignState(std::string_view key, std::string encoded);

// The encoded state inside `bytes`. With a key: INVALID_ARGUMENT unless
// `bytes` end with a valid signature under it (compared in constant time).
// Without one: a signature present is dropped unchecked.
absl::StatusOr<std::string_view> VerifyState(std::string_view key, std::string_view bytes);

}  // namespace performer::server
