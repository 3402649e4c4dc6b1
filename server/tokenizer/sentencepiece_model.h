// A thin wrapper over sentencepiece::SentencePieceProcessor with std types
// only. Debian's sentencepiece headers define their own absl::string_view,
// which clashes with Abseil's: they may only be included by a translation
// unit that includes no Abseil header, which is what this wrapper is for.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace performer::server {

class SentencePieceModel {
 public:
  // nullptr and *error set when the file cannot be loaded.
  static std::unique_ptr<SentencePieceModel> Load(const std::string& path, std::string* error);
  ~SentencePieceModel();

  int vocab_size() const;
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  // Ids must be inside the vocabulary.
  std::string Decode(const std::vector<int>& ids) const;

 private:
  struct Impl;
  explicit SentencePieceModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Trains a model (tests and tools): `options` in sentencepiece's
// "--input=... --model_prefix=..." form. Empty string on success, else the error.
std::string TrainSentencePieceModel(const std::string& options);

}  // namespace performer::server
