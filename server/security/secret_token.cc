#include "server/security/secret_token.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/security/token_authenticator.h"
#include "server/security/token_file.h"

namespace performer::server {

SecretToken::SecretToken(std::string path, std::string token)
    : path_(std::move(path)), token_(std::move(token)) {}

absl::StatusOr<std::string> ReadOneToken(const std::string& path) {
  absl::StatusOr<std::vector<TokenEntry>> entries = ReadTokenFile(path);
  if (!entries.ok()) return entries.status();
  if (entries->size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": holds ", entries->size(), " tokens; it must hold exactly one"));
  }
  return std::move((*entries)[0].token);
}

absl::StatusOr<std::unique_ptr<SecretToken>> SecretToken::FromFile(const std::string& path) {
  absl::StatusOr<std::string> token = ReadOneToken(path);
  if (!token.ok()) return token.status();
  return std::unique_ptr<SecretToken>(new SecretToken(path, *std::move(token)));
}

absl::Status SecretToken::Reload() {
  absl::StatusOr<std::string> token = ReadOneToken(path_);
  if (!token.ok()) return token.status();
  std::lock_guard<std::mutex> lock(mu_);
  token_ = *std::move(token);
  return absl::OkStatus();
}

bool SecretToken::Matches(std::string_view presented) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ConstantTimeEquals(token_, presented);
}

}  // namespace performer::server
