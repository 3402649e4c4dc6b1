// Who is making a call, as the bearer-token authenticator established it,
// and what that caller may do beyond generating.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace performer::server {

// Permissions a token may carry (token_file.h). Generation, model listing
// and cancelling one's own requests need none.
enum class Permission : uint32_t {
  // Ask for a queue priority above --max_priority_unprivileged.
  kPriority = 1u << 0,
  // Cancel requests of any caller, not only one's own.
  kCancelAny = 1u << 1,
  // Move any caller's session out of this replica (TakeSession): what a
  // peer replica's token carries.
  kPeer = 1u << 2,
};

// Every permission: what "admin" grants.
inline constexpr uint32_t kAllPermissions = static_cast<uint32_t>(Permission::kPriority) |
                                            static_cast<uint32_t>(Permission::kCancelAny) |
                                            static_cast<uint32_t>(Permission::kPeer);

// The name of a permission in token files, logs and metrics labels.
std::string_view PermissionName(Permission permission);

// "priority", "cancel_any", "peer" or "admin" (every permission) as a bit set;
// INVALID_ARGUMENT for anything else.
absl::StatusOr<uint32_t> ParsePermission(std::string_view name);

struct Caller {
  // The token's name from the token file: a bounded set, fit for logs and
  // metric labels, and the namespace of the caller's request ids. Empty
  // when the server authenticates no one (every caller is anonymous and
  // they share one namespace).
  std::string name;
  uint32_t permissions = 0;

  bool Has(Permission permission) const {
    return (permissions & static_cast<uint32_t>(permission)) != 0;
  }
};

}  // namespace performer::server
