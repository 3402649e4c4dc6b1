// The bearer-token file of --auth_tokens_file: one token per line,
//
//   <token> [<name> [<permission>[,<permission>...]]]
//
// separated by spaces or tabs. Blank lines are skipped; "#" starts a
// comment (a whole line, or the rest of a line after a field). A token is
// 16 to 4096 characters of RFC 6750's b64token alphabet (letters, digits,
// "-._~+/", then optional "="). A name is 1 to 64 characters of letters,
// digits and "-_."; it goes into logs, the caller metric label and the
// request-id namespace, and defaults to "line-<N>" (its line number). Names
// may repeat (a client's old and new token while rotating); tokens may not.
// Permissions: priority, cancel_any, peer, admin (= every permission); none by
// default. Errors name the line, never the token.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/security/caller.h"

namespace performer::server {

struct TokenEntry {
  std::string token;
  Caller caller;
};

// INVALID_ARGUMENT naming the line of the first malformed entry.
absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(std::string_view text);

// Reads and parses `path`; NOT_FOUND / PERMISSION_DENIED when it cannot be
// read, the parse error otherwise (each message names the file).
absl::StatusOr<std::vector<TokenEntry>> ReadTokenFile(const std::string& path);

// The whole of a small secret file (a token, a certificate), or an error
// naming it. Refuses files above 1 MiB.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace performer::server
