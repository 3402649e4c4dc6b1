#include "server/process/listener_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace performer::server {
namespace {

// The local port of a listening TCP socket; 0 for any other descriptor.
int ListeningPort(int fd) {
  int listening = 0;
  socklen_t size = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || listening == 0) {
    return 0;
  }
  int protocol = 0;
  size = sizeof(protocol);
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &size) != 0 || protocol != IPPROTO_TCP) {
    return 0;
  }
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  }
  return 0;
}

// This process's open descriptor numbers.
std::vector<int> OpenDescriptors() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end != entry->d_name && *end == '\0' && fd != own) fds.push_back(static_cast<int>(fd));
  }
  closedir(dir);
  return fds;
}

}  // namespace

int AcceptQueueLength(int fd) {
  tcp_info info{};
  socklen_t size = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0 || info.tcpi_state != TCP_LISTEN) {
    return -1;
  }
  // For a listening socket Linux reports the accept queue's length here.
  return static_cast<int>(info.tcpi_unacked);
}

ListenerWatch::ListenerWatch(const std::vector<int>& ports) {
  for (const int fd : OpenDescriptors()) {
    const int port = ListeningPort(fd);
    if (port == 0 || std::find(ports.begin(), ports.end(), port) == ports.end()) continue;
    const int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) continue;
    // The number may have been closed and reused since it was looked at.
    if (ListeningPort(copy) != port) {
      close(copy);
      continue;
    }
    listeners_.push_back({copy, port, std::nullopt});
  }
}

ListenerWatch::~ListenerWatch() {
  for (const Listener& listener : listeners_) close(listener.fd);
}

std::optional<ListenerWatch::Stall> ListenerWatch::Sample(absl::Time now, absl::Duration window) {
  std::optional<Stall> stall;
  for (Listener& listener : listeners_) {
    const int queued = AcceptQueueLength(listener.fd);
    if (queued <= 0) {
      listener.queued_since.reset();
      continue;
    }
    if (!listener.queued_since) listener.queued_since = now;
    if (!stall && now - *listener.queued_since >= window) stall = Stall{listener.port, queued};
  }
  return stall;
}

}  // namespace performer::server
