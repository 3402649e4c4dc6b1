// The HTTP endpoint Prometheus scrapes (prometheus-cpp's Exposer over
// civetweb), started with bounds that keep it answering under idle or
// hostile connections.
#pragma once

#include <prometheus/exposer.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace performer::server {

class SecretToken;

struct MetricsEndpointOptions {
  std::string host = "127.0.0.1";  // an IPv4 or IPv6 address
  int port = 9464;                 // 0 = a free port
  // Worker threads: each connection holds one until its request is read
  // and answered.
  int threads = 32;
  // How long a connection may take to send its request. A connection that
  // sends nothing (half-open, or a slow client) frees its thread after this,
  // so a scrape behind N such connections waits about
  // ceil(N / threads) x this (64 idle connections: 2 s).
  int request_timeout_ms = 1000;
  // When set, a scrape needs HTTP basic auth with this token as password.
  const SecretToken* token = nullptr;  // not owned; must outlive the endpoint
};

// Listens on host:port and serves what is registered on the returned
// exposer. UNAVAILABLE with the address when it cannot listen.
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const MetricsEndpointOptions& options);

// The port the endpoint listens on; -1 if none.
int MetricsEndpointPort(prometheus::Exposer& exposer);

}  // namespace performer::server
