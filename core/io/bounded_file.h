// Reading the files of a model folder, which may be hostile: a FIFO, a
// device or a directory under a file's name, a file of gigabytes where a
// small JSON document is expected, or JSON nested deeper than a recursive
// reader's stack allows.
//
// Every function here refuses anything but a regular file (after following
// symbolic links) without blocking: the file is opened with O_NONBLOCK and
// checked with fstat before a byte is read, so a FIFO never hangs the
// caller. Errors name the file; a missing file is NOT_FOUND, so that
// callers can tell an optional file's absence from a bad one.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace performer::io {

// Largest config.json / generation_config.json / tokenizer.json read: real
// ones are a few kilobytes.
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{16} << 20;
// Deepest nesting of arrays and objects accepted in a JSON document. The
// files read here nest at most three levels; the bound keeps recursive
// walks over a parsed document (dump(), copies) within the thread's stack.
inline constexpr int kMaxJsonDepth = 64;

// The size of `path` when it is a regular file of at most `max_bytes`;
// NOT_FOUND when it does not exist, INVALID_ARGUMENT when it is not a
// regular file or is larger.
absl::StatusOr<uint64_t> RegularFileSize(const std::string& path, uint64_t max_bytes);

// The whole of `path`, under RegularFileSize's rules.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, uint64_t max_bytes);

// `text` parsed as JSON, nested at most kMaxJsonDepth deep; INVALID_ARGUMENT
// naming `what` (a path) otherwise.
absl::StatusOr<nlohmann::json> ParseBoundedJson(std::string_view text, const std::string& what);

// ReadBoundedFile(path, kMaxJsonFileBytes) then ParseBoundedJson.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace performer::io
