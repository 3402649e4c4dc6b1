// One secret token read from a file and compared in constant time: the
// token of the metrics endpoint (--metrics_auth_token_file). The file has
// the syntax of the bearer-token file (token_file.h) and exactly one token;
// its name and permissions, if any, are ignored. Reload swaps in the file's
// current token; a check running meanwhile sees the old or the new one.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace performer::server {

// The one token of a file in the bearer-token file's syntax (its name and
// permissions ignored); INVALID_ARGUMENT unless it holds exactly one.
absl::StatusOr<std::string> ReadOneToken(const std::string& path);

class SecretToken {
 public:
  static absl::StatusOr<std::unique_ptr<SecretToken>> FromFile(const std::string& path);

  // On error the token in force stays.
  absl::Status Reload();
  bool Matches(std::string_view presented) const;
  const std::string& path() const { return path_; }

 private:
  SecretToken(std::string path, std::string token);

  const std::string path_;
  mutable std::mutex mu_;
  std::string token_;
};

}  // namespace performer::server
