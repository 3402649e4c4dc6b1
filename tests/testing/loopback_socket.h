// A TCP socket on 127.0.0.1 for tests: listening but never accepting (the
// kernel completes connections and nothing answers: a listener's queue, a
// peer too slow to answer), or bound and not listening (connections are
// refused: a replica that is down). Closed when destroyed.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace performer::testing {

class LoopbackSocket {
 public:
  explicit LoopbackSocket(bool listening) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    if (listening) {
      EXPECT_EQ(listen(fd_, 16), 0);
    }
    socklen_t length = sizeof(address);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length), 0);
    port_ = ntohs(address.sin_port);
  }
  ~LoopbackSocket() { close(fd_); }
  LoopbackSocket(const LoopbackSocket&) = delete;
  LoopbackSocket& operator=(const LoopbackSocket&) = delete;

  int fd() const { return fd_; }
  int port() const { return port_; }
  // "127.0.0.1:port".
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // A client connection to this socket (the kernel completes it whether or
  // not anyone accepts it).
  int Connect() const {
    const int client = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port_));
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    return client;
  }

 private:
  int fd_;
  int port_ = 0;
};

}  // namespace performer::testing
