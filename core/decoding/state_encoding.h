// The bytes of an exported sequence state (a session's, for ExportSession /
// ImportSession and the spill folder): versioned, checksummed, and bound to
// the model it came from, so that it can move between processes and
// replicas of the same model and is refused anywhere else.
//
// Layout (integers little-endian):
//   "PFSTATE\0"                  8 bytes, magic
//   u32 version                  kStateEncodingVersion
//   str model name, str config hash, str weights hash   (str = u32 length + bytes)
//   i64 position                 tokens the state has consumed
//   u32 n, i64 x n               the tokens the sequence has seen (n >= position;
//                                those past the position are still to be fed)
//   u32 layers; per layer u32 tensors; per tensor
//     u8 dtype (0 float32, 1 float64), u32 rank, i64 x rank sizes, raw data
//   u64 checksum                 FNV-1a 64 of every byte before it
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/decoding/model_fingerprint.h"
#include "core/recurrent/state_snapshot.h"

namespace performer::decoding {

inline constexpr uint32_t kStateEncodingVersion = 1;

struct EncodedState {
  StateSnapshot snapshot;
  std::vector<int64_t> tokens;  // tokens[snapshot.position:] are still to be fed
};

// FNV-1a 64 of `bytes`, continuing from `seed` (the offset basis by
// default), and as 16 hex digits.
uint64_t Fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);
std::string HexDigest(uint64_t value);

// The bytes of a state. Throws nothing; tensors of another dtype than
// float32 / float64 are an InvalidArgument.
absl::StatusOr<std::string> EncodeState(const ModelFingerprint& fingerprint,
                                        const EncodedState& state);

// Reads the bytes back: InvalidArgument for anything truncated, corrupted
// (checksum), of an unknown version or malformed (at most max_bytes of
// tensor data, every length checked against what is left), and
// FailedPrecondition when the fingerprint is not `expected` (a state of
// another model, configuration or weights).
absl::StatusOr<EncodedState> DecodeState(std::string_view bytes, const ModelFingerprint& expected,
                                         int64_t max_bytes);

}  // namespace performer::decoding
