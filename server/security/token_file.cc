#include "server/security/token_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace performer::server {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;
constexpr size_t kMaxNameLength = 64;
constexpr size_t kMaxSecretFileBytes = 1 << 20;

bool IsB64Token(absl::string_view token) {
  size_t i = 0;
  while (i < token.size() &&
         (absl::ascii_isalnum(token[i]) || token[i] == '-' || token[i] == '.' || token[i] == '_' ||
          token[i] == '~' || token[i] == '+' || token[i] == '/')) {
    ++i;
  }
  if (i == 0) return false;
  while (i < token.size() && token[i] == '=') ++i;
  return i == token.size();
}

bool IsName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(std::string_view text) {
  std::vector<TokenEntry> entries;
  std::set<absl::string_view> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    std::vector<absl::string_view> fields;
    for (absl::string_view field :
         absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty())) {
      if (field[0] == '#') break;
      fields.push_back(field);
    }
    if (fields.empty()) continue;
    const auto error = [line_number](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", what));
    };
    if (fields.size() > 3) {
      return error(
          "too many fields; expected <token> [<name> [<permission>,...]] (a name has no spaces)");
    }
    const absl::string_view token = fields[0];
    if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
      return error(absl::StrCat("the token has ", token.size(), " characters; it needs ",
                                kMinTokenLength, " to ", kMaxTokenLength));
    }
    if (!IsB64Token(token)) {
      return error(
          "the token has a character outside letters, digits and -._~+/ (and = at its end)");
    }
    if (!tokens.insert(token).second) return error("the same token appears on an earlier line");
    TokenEntry entry;
    entry.token = std::string(token);
    entry.caller.name = absl::StrCat("line-", line_number);
    if (fields.size() >= 2) {
      if (!IsName(fields[1])) {
        return error(absl::StrCat("the name \"", fields[1],
                                  "\" is not 1 to 64 letters, digits, '-', '_' or '.'"));
      }
      entry.caller.name = std::string(fields[1]);
    }
    if (fields.size() == 3) {
      for (absl::string_view permission : absl::StrSplit(fields[2], ',')) {
        absl::StatusOr<uint32_t> bits =
            ParsePermission(std::string_view(permission.data(), permission.size()));
        if (!bits.ok()) return error(bits.status().message());
        entry.caller.permissions |= *bits;
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message = absl::StrCat(path, ": ", std::strerror(error));
    return error == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  std::string text;
  char buffer[4096];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxSecretFileBytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": larger than 1 MiB"));
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return text;
}

absl::StatusOr<std::vector<TokenEntry>> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSecretFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(*text);
  if (!entries.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ", ", entries.status().message()));
  }
  return entries;
}

}  // namespace performer::server
