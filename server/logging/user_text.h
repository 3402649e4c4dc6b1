// User-supplied text as the server quotes it in error messages and logs.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace performer::server {

// Bytes of user text a message or log line quotes at most.
inline constexpr size_t kMaxQuotedUserBytes = 64;

// `text` if it has at most `max_bytes` bytes; otherwise its first bytes, cut
// before a UTF-8 continuation byte so that no character is split, then
// "... (N bytes)" with its full length. A client can thus not make an error
// message or a log line as long as the field it sent.
std::string BoundUserText(absl::string_view text, size_t max_bytes = kMaxQuotedUserBytes);

}  // namespace performer::server
