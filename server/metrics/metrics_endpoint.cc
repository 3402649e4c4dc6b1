#include "server/metrics/metrics_endpoint.h"

#include <arpa/inet.h>
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
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    address.sin_addr.s_addr = htonl(INADDR_ANY);
  }
  int port = -1;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    const MetricsEndpointOptions& options) {
  const int port = options.port == 0 ? PickFreePort(options.host) : options.port;
  const std::string address = absl::StrCat(options.host, ":", port);
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
