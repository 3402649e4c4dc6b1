#include "server/engine/text_output.h"

#include <algorithm>
#include <utility>

namespace performer::server {

TextOutput::TextOutput(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : detokenizer_(tokenizer), stops_(std::move(stop_strings)) {}

std::string TextOutput::Release(size_t end) {
  end = std::max(end, released_);
  // Segments end on character boundaries (the detokenizer releases whole
  // characters and stop strings are valid UTF-8), so each can be cleaned
  // on its own.
  std::string out = SanitizeUtf8(std::string_view(text_).substr(released_, end - released_));
  released_ = end;
  return out;
}

std::string TextOutput::Push(int32_t token, bool* stopped) {
  *stopped = false;
  if (stopped_) return "";
  text_ += detokenizer_.Push({token});
  const generation::StopStringMatcher::Match match = stops_.Scan(text_);
  if (match.stopped) {
    stopped_ = true;
    *stopped = true;
  }
  return Release(match.releasable);
}

std::string TextOutput::Flush() {
  if (stopped_) return "";
  text_ += detokenizer_.Finish();
  return Release(text_.size());
}

}  // namespace performer::server
