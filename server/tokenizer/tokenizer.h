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
};

// Streaming detokenization: text is released only once it is complete (a
// UTF-8 character split over tokens, or a SentencePiece piece whose text
// depends on the next token, is held back), so concatenating every Push()
// and the final Finish() gives exactly Decode(all ids).
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
  // Text of ids_[begin, end).
  std::string DecodeRange(size_t begin, size_t end) const;

  const Tokenizer& tokenizer_;
  std::vector<int32_t> ids_;
  std::string released_;
  // Only a window of recent ids is re-decoded per token (so a long
  // generation costs O(1) per token, not O(length)): the text of
  // ids_[window_begin_, ids_.size()) minus that of ids_[window_begin_,
  // window_end_) is what is new. The window keeps the previous piece so
  // that SentencePiece's leading-space rule sees its context.
  size_t window_begin_ = 0;
  size_t window_end_ = 0;
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
