// The text side of one generation: incremental detokenization plus stop
// strings that may span token boundaries. Text that could still turn out to
// be the start of a stop string is held back until it cannot, so nothing
// past a stop string is ever released.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"

namespace performer::server {

class TextOutput {
 public:
  TextOutput(const Tokenizer& tokenizer, std::vector<std::string> stop_strings);

  // Adds one generated token; returns the text that is now safe to release.
  // When a stop string is completed, sets *stopped and returns the text up to
  // and including it; nothing after it is ever released.
  std::string Push(int32_t token, bool* stopped);
  // The end of the generation: everything held back.
  std::string Flush();

 private:
  std::string Release(size_t end);

  IncrementalDetokenizer detokenizer_;
  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;
  std::string text_;     // all complete text so far
  size_t released_ = 0;  // bytes of text_ handed out
  size_t searched_ = 0;  // text_ before this offset has no stop string ending in it
  bool stopped_ = false;
};

}  // namespace performer::server
