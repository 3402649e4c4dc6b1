// SentencePiece behind a plugin boundary, with std types only.
//
// Debian's libsentencepiece carries its own copy of protobuf-lite 3.14 and
// exports those symbols. Linked into a process that also loads libprotobuf
// 3.21 (gRPC, LibTorch), one copy's static initialisers call the other's
// functions and the process crashes before main; loaded with RTLD_LOCAL it
// binds to libprotobuf and aborts on the version check; with RTLD_DEEPBIND
// it crashes on libstdc++'s copy-relocated std::cerr. So the small plugin
// libperformer_sentencepiece.so (sentencepiece_plugin.cc) is loaded with
// dlmopen into a link namespace of its own, behind a C interface that
// copies every result into the caller's buffers. (Its headers also define
// an absl::string_view of their own, which is why the plugin includes no
// Abseil header.)
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace performer::server {

class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  virtual int vocab_size() const = 0;
  virtual bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const = 0;
  // Ids must be inside the vocabulary.
  virtual std::string Decode(const std::vector<int>& ids) const = 0;
};

// nullptr and *error set when the plugin or the model file cannot be loaded.
std::unique_ptr<SentencePieceModel> LoadSentencePieceModel(const std::string& path,
                                                           std::string* error);

// Trains a model (tests and tools): `options` in sentencepiece's
// "--input=... --model_prefix=..." form. Empty string on success, else the error.
std::string TrainSentencePieceModel(const std::string& options);

}  // namespace performer::server
