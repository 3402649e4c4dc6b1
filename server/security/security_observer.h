// What the security layer reports, for metrics, without knowing them.
#pragma once

#include <string_view>

#include "server/security/caller.h"

namespace performer::server {

class SecurityObserver {
 public:
  virtual ~SecurityObserver() = default;
  // A call checked for a bearer token: `caller` is the token's name when
  // `result` is "ok", empty when it is "missing" (no token) or "invalid"
  // (a malformed header or an unknown token).
  virtual void OnAuthentication(std::string_view caller, std::string_view result) = 0;
  // An authenticated call refused for lack of `permission`.
  virtual void OnPermissionDenied(std::string_view caller, Permission permission) = 0;
  // A reload of `credentials` ("auth_tokens", "metrics_token", "tls") from
  // its files, successful or not.
  virtual void OnCredentialsReload(std::string_view credentials, bool ok) = 0;
};

}  // namespace performer::server
