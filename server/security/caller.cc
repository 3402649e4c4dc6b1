#include "server/security/caller.h"

#include "absl/strings/str_cat.h"

namespace performer::server {

std::string_view PermissionName(Permission permission) {
  switch (permission) {
    case Permission::kPriority:
      return "priority";
    case Permission::kCancelAny:
      return "cancel_any";
    case Permission::kPeer:
      return "peer";
  }
  return "unknown";
}

absl::StatusOr<uint32_t> ParsePermission(std::string_view name) {
  if (name == "admin") return kAllPermissions;
  for (Permission p : {Permission::kPriority, Permission::kCancelAny, Permission::kPeer}) {
    if (name == PermissionName(p)) return static_cast<uint32_t>(p);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown permission \"", std::string(name),
                   "\" (known: priority, cancel_any, peer, admin = all three)"));
}

}  // namespace performer::server
