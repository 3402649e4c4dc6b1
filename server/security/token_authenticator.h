// Bearer-token authentication against the tokens of --auth_tokens_file.
// The token set can be replaced while calls are being checked (Reload, on
// SIGHUP or when the file changes); a call checked before the swap keeps
// the answer it got.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/security/caller.h"
#include "server/security/token_file.h"

namespace performer::server {

// "a" == "b" in time that depends on the length of `presented` only, not
// on where the strings differ nor on `expected`'s content.
bool ConstantTimeEquals(std::string_view expected, std::string_view presented);

class TokenAuthenticator {
 public:
  // Serves `entries` (reload re-reads `path`, when not empty).
  explicit TokenAuthenticator(std::vector<TokenEntry> entries, std::string path = "");

  // Reads `path` (token_file.h); the error names the file and line.
  static absl::StatusOr<std::unique_ptr<TokenAuthenticator>> FromFile(const std::string& path);

  // Re-reads the file and swaps the tokens in. On error the tokens in
  // force stay as they were.
  absl::Status Reload();

  // The caller whose token `authorization` (the value of the
  // "authorization" metadata) presents as "Bearer <token>". UNAUTHENTICATED
  // with a reason fit for the client (it never repeats the token) when the
  // header is missing, malformed or presents an unknown token. Every token
  // in force is compared, each in constant time.
  absl::StatusOr<Caller> Authenticate(std::string_view authorization) const;

  const std::string& path() const { return path_; }
  size_t size() const;
  // The names of the tokens in force, sorted, without repeats.
  std::vector<std::string> names() const;

 private:
  using Table = std::vector<TokenEntry>;
  std::shared_ptr<const Table> table() const;

  const std::string path_;
  mutable std::mutex mu_;
  std::shared_ptr<const Table> table_;
};

}  // namespace performer::server
