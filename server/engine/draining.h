// The one answer to new work while the server drains (SIGTERM): every
// protocol's refusal, for requests, sessions and embeddings alike.
// UNAVAILABLE, so that clients and proxies retry on another replica.
#pragma once

#include "absl/status/status.h"

namespace performer::server {

inline absl::Status DrainingError() {
  return absl::UnavailableError("the server is shutting down and accepts no new requests");
}

}  // namespace performer::server
