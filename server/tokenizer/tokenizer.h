// Text <-> token ids for a hosted model. A model folder names its tokenizer
// (see LoadTokenizer); a model without one takes and returns token ids only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace performer::server {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte" or "sentencepiece" (ModelInfo.tokenizer).
  virtual std::string name() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const = 0;
  // Ids outside the vocabulary decode to nothing.
  virtual std::string Decode(const std::vector<int32_t>& ids) const = 0;
  // The text `ids` add when they follow ids whose text is not empty: for
  // any such prefix p, Decode(p + ids) == Decode(p) + DecodeContinuation(ids)
  // as long as Decode(p) ends on a complete character. Decode differs at the
  // start (SentencePiece drops the leading space of the opening pieces).
  virtual std::string DecodeContinuation(const std::vector<int32_t>& ids) const = 0;
};

// Streaming detokenization: text is released only once it is complete (a
// UTF-8 character split over tokens, or bytes that SentencePiece shows as
// U+FFFD until the rest of their character arrives, are held back), so
// concatenating every Push() and the final Finish() gives exactly
// Decode(all ids). Each Push decodes only the ids not yet released (O(1)
// per token), except while every id so far decodes to nothing: those are
// decoded from the start, since the first text's leading space depends on
// them.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // Appends ids; returns the newly completed text.
  std::string Push(const std::vector<int32_t>& ids);
  // The rest (possibly an incomplete UTF-8 tail, as Decode would give it).
  std::string Finish();
  // Everything released so far.
  const std::string& released() const { return released_; }

 private:
  // The text of `pending_`: Decode while nothing is released, else
  // DecodeContinuation.
  std::string PendingText() const;

  const Tokenizer& tokenizer_;
  // Ids whose text is not released yet: every id so far while released_ is
  // empty.
  std::vector<int32_t> pending_;
  std::string released_;
};

// `text` with every invalid UTF-8 sequence (stray or missing continuation
// bytes, overlong forms, surrogates, code points past U+10FFFF) replaced by
// U+FFFD, so that it can go into a protobuf string field. A byte-level model
// can emit any byte.
std::string SanitizeUtf8(std::string_view text);

// Length of the longest prefix of `text` that does not end inside a UTF-8
// multi-byte character.
size_t CompleteUtf8Prefix(std::string_view text);

// Largest SentencePiece model file loaded (real ones are a few megabytes).
inline constexpr uint64_t kMaxSentencePieceModelBytes = uint64_t{1} << 30;

// The tokenizer a model folder names: "tokenizer.json" holding
// {"type": "byte"} or {"type": "sentencepiece", "model": "tokenizer.model"},
// or else a "tokenizer.model" file (SentencePiece). nullptr when the folder
// names none. InvalidArgument / NotFound with the path for a bad one; both
// files must be regular files (tokenizer.json at most 16 MiB).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const std::string& model_dir);

std::unique_ptr<Tokenizer> MakeByteTokenizer();
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& path);

}  // namespace performer::server
