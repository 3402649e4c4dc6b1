// performer-serve's configuration: every flag of the program (defined in
// server_config.cc, listed in docs/serving.md), read into one value and
// checked in one place. A ServerConfig that ValidateServerConfig accepts is
// one the server can start with as far as the flags go: every bound and
// every rule between flags is checked there, each with a message naming the
// flag; what only the start can tell (a file that does not read, a port
// already taken) is reported by the start itself.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/metrics/server_metrics.h"
#include "server/repository/model_repository.h"
#include "server/security/tls_credentials.h"

namespace performer::server {

// The gRPC listener and its transport.
struct GrpcConfig {
  std::string host = "0.0.0.0";
  int32_t port = 50051;      // 0 = a free port
  std::string port_file;     // written once serving starts; empty = none
  int32_t health_port = -1;  // plaintext health-only port; -1 = none
  bool reflection = false;
  int64_t max_message_bytes = 4 << 20;
  int32_t max_concurrent_streams = 256;
  int32_t max_threads = 0;  // 0 = gRPC's default
  int32_t keepalive_time_ms = 60000;
  int32_t keepalive_timeout_ms = 20000;
  int32_t keepalive_min_client_ping_ms = 10000;

  // host:port as gRPC takes it (an IPv6 literal in brackets).
  std::string Address(int32_t port_number) const;
};

// The HTTP listener (server/http/): the OpenAI-compatible API.
struct HttpConfig {
  int32_t port = -1;  // -1 = off, 0 = a free port; on GrpcConfig::host
  std::string port_file;
  int32_t threads = 2;
  int64_t max_connections = 10000;
};

// The Prometheus endpoint.
struct MetricsConfig {
  std::string host = "127.0.0.1";
  int32_t port = 9464;  // 0 = a free port, -1 = none
  std::string port_file;
  std::string auth_token_file;
  MetricBuckets buckets = MetricBuckets::Defaults();
};

// Who may call, over what.
struct SecurityConfig {
  TlsFiles tls;
  std::string auth_tokens_file;
  std::string state_signing_key_file;  // read at the start into the sessions' options
  int32_t max_priority_unprivileged = 0;
  int32_t credentials_reload_seconds = 10;

  bool tls_on() const { return !tls.cert_file.empty(); }
};

// Where sessions this replica does not hold are moved from
// (server/service/session_peers.h).
struct SessionPeerConfig {
  std::vector<std::string> peers;  // host:port or dns:///name:port; empty = none
  std::string token_file;          // bearer token presented to peers
  std::string ca_file;             // roots of the peers' certificates; "" = plaintext
  absl::Duration timeout = absl::Seconds(2);
};

struct ServerConfig {
  std::string model_repository;
  std::string default_model;
  // The models, their engines and what one request may carry.
  // observer_for_model is left unset: the server sets it to its metrics.
  RepositoryOptions repository;
  int32_t intra_op_threads = 0;  // 0 = one per online CPU
  // On CUDA, the kernels compute each row the same way whatever the batch
  // and prompts run token by token (kernels/cuda_row_invariance.h), so that
  // a request's logits are the same bits however it is fed, as on the CPU.
  bool cuda_same_bits = false;
  int64_t stream_buffer_tokens = 1024;
  int64_t stream_interval = 1;  // tokens per streamed message
  int32_t io_thread_nice = 0;   // added to every thread's nice but the compute threads'
  absl::Duration drain_timeout = absl::Seconds(30);
  absl::Duration liveness_stall = absl::Seconds(30);
  GrpcConfig grpc;
  HttpConfig http;
  MetricsConfig metrics;
  SecurityConfig security;
  SessionPeerConfig session_peers;
};

// --log_format and --log_level, read apart from the rest so that the server
// can log in the asked-for format why the rest does not validate.
struct LogConfig {
  std::string format = "plain";
  std::string level = "info";
};
LogConfig LogConfigFromFlags();

// Every bound and cross-flag rule; INVALID_ARGUMENT naming the flag (or, for
// the device, what CheckServingDevice says) at the first one broken.
absl::Status ValidateServerConfig(const ServerConfig& config);

// The flags as parsed (absl::ParseCommandLine), with the derived defaults
// filled in (--prefix_cache_interval_tokens=0 is the chunk size), then
// validated.
absl::StatusOr<ServerConfig> ServerConfigFromFlags();

}  // namespace performer::server
