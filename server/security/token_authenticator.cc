#include "server/security/token_authenticator.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace performer::server {

bool ConstantTimeEquals(std::string_view expected, std::string_view presented) {
  if (expected.empty()) return false;
  unsigned char diff = expected.size() == presented.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ expected[i % expected.size()]);
  }
  return diff == 0;
}

TokenAuthenticator::TokenAuthenticator(std::vector<TokenEntry> entries, std::string path)
    : path_(std::move(path)), table_(std::make_shared<const Table>(std::move(entries))) {}

absl::StatusOr<std::unique_ptr<TokenAuthenticator>> TokenAuthenticator::FromFile(
    const std::string& path) {
  absl::StatusOr<std::vector<TokenEntry>> entries = ReadTokenFile(path);
  if (!entries.ok()) return entries.status();
  return std::make_unique<TokenAuthenticator>(*std::move(entries), path);
}

absl::Status TokenAuthenticator::Reload() {
  if (path_.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<TokenEntry>> entries = ReadTokenFile(path_);
  if (!entries.ok()) return entries.status();
  auto table = std::make_shared<const Table>(*std::move(entries));
  std::lock_guard<std::mutex> lock(mu_);
  table_ = std::move(table);
  return absl::OkStatus();
}

std::shared_ptr<const TokenAuthenticator::Table> TokenAuthenticator::table() const {
  std::lock_guard<std::mutex> lock(mu_);
  return table_;
}

absl::StatusOr<Caller> TokenAuthenticator::Authenticate(std::string_view authorization) const {
  if (authorization.empty()) {
    return absl::UnauthenticatedError(
        "this server needs a bearer token: send metadata \"authorization: Bearer <token>\"");
  }
  constexpr std::string_view kScheme = "bearer ";
  bool bearer = authorization.size() > kScheme.size();
  for (size_t i = 0; bearer && i < kScheme.size(); ++i) {
    bearer = absl::ascii_tolower(static_cast<unsigned char>(authorization[i])) == kScheme[i];
  }
  if (!bearer) {
    return absl::UnauthenticatedError(
        "the authorization metadata is not \"Bearer <token>\" (other schemes are not accepted)");
  }
  const std::string_view rest = authorization.substr(kScheme.size());
  const absl::string_view stripped =
      absl::StripAsciiWhitespace(absl::string_view(rest.data(), rest.size()));
  const std::string_view token(stripped.data(), stripped.size());
  const std::shared_ptr<const Table> table = this->table();
  const TokenEntry* match = nullptr;
  // No early exit: the time taken does not say which entry matched.
  for (const TokenEntry& entry : *table) {
    if (ConstantTimeEquals(entry.token, token)) match = &entry;
  }
  if (match == nullptr) {
    return absl::UnauthenticatedError("the bearer token is not valid on this server");
  }
  return match->caller;
}

size_t TokenAuthenticator::size() const { return table()->size(); }

std::vector<std::string> TokenAuthenticator::names() const {
  std::set<std::string> names;
  for (const TokenEntry& entry : *table()) names.insert(entry.caller.name);
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace performer::server
