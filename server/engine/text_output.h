// The text side of one generation: incremental detokenization, with the
// stop strings of generation::StopStringMatcher applied to the text as it
// grows. Text is released in valid UTF-8 segments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/generation/stop_rules.h"
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
  generation::StopStringMatcher stops_;
  std::string text_;     // all complete text so far
  size_t released_ = 0;  // bytes of text_ handed out
  bool stopped_ = false;
};

}  // namespace performer::server
