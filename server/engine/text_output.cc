#include "server/engine/text_output.h"

#include <algorithm>
#include <utility>

namespace performer::server {

TextOutput::TextOutput(const Tokenizer& tokenizer, std::vector<std::string> stop_strings)
    : detokenizer_(tokenizer), stop_strings_(std::move(stop_strings)) {
  for (const std::string& s : stop_strings_) longest_stop_ = std::max(longest_stop_, s.size());
}

std::string TextOutput::Release(size_t end) {
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
  if (stop_strings_.empty()) return Release(text_.size());
  // Earliest-ending stop string among those that end in the new text.
  const size_t from = searched_ >= longest_stop_ ? searched_ - longest_stop_ + 1 : 0;
  size_t stop_end = std::string::npos;
  for (const std::string& s : stop_strings_) {
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) stop_end = std::min(stop_end, at + s.size());
  }
  searched_ = text_.size();
  if (stop_end != std::string::npos) {
    stopped_ = true;
    *stopped = true;
    return Release(std::max(stop_end, released_));
  }
  // Hold back the longest tail that is a proper prefix of a stop string.
  size_t hold = 0;
  const size_t unreleased = text_.size() - released_;
  for (const std::string& s : stop_strings_) {
    for (size_t n = std::min(unreleased, s.size() - 1); n > hold; --n) {
      if (text_.compare(text_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
    }
  }
  return Release(text_.size() - hold);
}

std::string TextOutput::Flush() {
  if (stopped_) return "";
  text_ += detokenizer_.Finish();
  return Release(text_.size());
}

}  // namespace performer::server
