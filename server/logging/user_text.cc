#include "server/logging/user_text.h"

#include "absl/strings/str_cat.h"

namespace performer::server {

std::string BoundUserText(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // 10xxxxxx continues a character: back up to its first byte.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(text.substr(0, cut), "... (", text.size(), " bytes)");
}

}  // namespace performer::server
