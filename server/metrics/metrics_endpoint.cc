#include "server/metrics/metrics_endpoint.h"

#include <arpa/inet.h>
#include <civetweb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/security/secret_token.h"

namespace performer::server {
namespace {

// A free TCP port on `host`, for port 0: civetweb cannot bind port 0
// itself. Another process could take the port between this probe and the
// bind; the start then fails with a clear error.
int PickFreePort(const std::string& host) {
  sockaddr_storage storage{};
  socklen_t size = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    size = sizeof(sockaddr_in6);
  } else {
    v4->sin_family = AF_INET;
    if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) v4->sin_addr.s_addr = INADDR_ANY;
    size = sizeof(sockaddr_in);
  }
  const int fd = socket(storage.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int port = -1;
  socklen_t length = size;
  if (bind(fd, reinterpret_cast<sockaddr*>(&storage), size) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &length) == 0) {
    port = ntohs(storage.ss_family == AF_INET6 ? v6->sin6_port : v4->sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const MetricsEndpointOptions& options) {
  // An IPv6 address with or without brackets; civetweb takes it in them.
  std::string host = options.host;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  // mg_check_feature(8): whether civetweb was built with IPv6 (Debian 12's
  // is not).
  if (host.find(':') != std::string::npos && mg_check_feature(8) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_host ", host,
        ": the metrics endpoint's HTTP server (civetweb) was built without IPv6; give an IPv4 "
        "address (0.0.0.0 listens on every interface)"));
  }
  const int port = options.port == 0 ? PickFreePort(host) : options.port;
  const std::string address = host.find(':') != std::string::npos
                                  ? absl::StrCat("[", host, "]:", port)
                                  : absl::StrCat(host, ":", port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", std::to_string(options.threads),
        "request_timeout_ms", std::to_string(options.request_timeout_ms)});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  if (options.token != nullptr) {
    const SecretToken* token = options.token;
    exposer->RegisterAuth([token](const std::string& /*user*/,
                                  const std::string& password) { return token->Matches(password); },
                          "performer-serve metrics");
  }
  return exposer;
}

int MetricsEndpointPort(prometheus::Exposer& exposer) {
  const std::vector<int> ports = exposer.GetListeningPorts();
  return ports.empty() ? -1 : ports[0];
}

}  // namespace performer::server
