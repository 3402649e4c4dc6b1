#include "server/process/listener_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <vector>

namespace performer::server {
namespace {

// A TCP socket on 127.0.0.1, listening (never accepting) when `listen`.
class Socket {
 public:
  explicit Socket(bool listening) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
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
  ~Socket() { close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  int port() const { return port_; }

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

TEST(AcceptQueueLengthTest, CountsTheConnectionsNobodyAccepted) {
  const Socket listener(/*listening=*/true);
  EXPECT_EQ(AcceptQueueLength(listener.fd()), 0);
  const int a = listener.Connect();
  const int b = listener.Connect();
  EXPECT_EQ(AcceptQueueLength(listener.fd()), 2);
  const int accepted = accept(listener.fd(), nullptr, nullptr);
  EXPECT_EQ(AcceptQueueLength(listener.fd()), 1);
  for (const int fd : {a, b, accepted}) close(fd);
}

TEST(AcceptQueueLengthTest, IsMinusOneForWhatIsNotAListener) {
  const Socket bound(/*listening=*/false);
  EXPECT_EQ(AcceptQueueLength(bound.fd()), -1);
  EXPECT_EQ(AcceptQueueLength(-1), -1);
}

TEST(ListenerWatchTest, FindsTheListenersOfThePortsAskedFor) {
  const Socket listener(/*listening=*/true);
  const Socket other(/*listening=*/true);
  const Socket bound(/*listening=*/false);
  EXPECT_EQ(ListenerWatch({listener.port()}).size(), 1);
  EXPECT_EQ(ListenerWatch({listener.port(), other.port()}).size(), 2);
  EXPECT_EQ(ListenerWatch({bound.port()}).size(), 0);
}

TEST(ListenerWatchTest, AQueueNeverEmptyForTheWindowIsAStall) {
  const Socket listener(/*listening=*/true);
  ListenerWatch watch({listener.port()});
  const absl::Time start = absl::FromUnixSeconds(1000);
  const absl::Duration window = absl::Seconds(2);
  EXPECT_FALSE(watch.Sample(start, window));
  const int client = listener.Connect();
  EXPECT_FALSE(watch.Sample(start + absl::Seconds(1), window));
  EXPECT_FALSE(watch.Sample(start + absl::Seconds(2), window));
  const std::optional<ListenerWatch::Stall> stall = watch.Sample(start + absl::Seconds(3), window);
  ASSERT_TRUE(stall);
  EXPECT_EQ(stall->port, listener.port());
  EXPECT_EQ(stall->queued, 1);
  // Accepting empties the queue: no stall, and the window starts over.
  const int accepted = accept(listener.fd(), nullptr, nullptr);
  EXPECT_FALSE(watch.Sample(start + absl::Seconds(4), window));
  const int late = listener.Connect();
  EXPECT_FALSE(watch.Sample(start + absl::Seconds(5), window));
  EXPECT_TRUE(watch.Sample(start + absl::Seconds(7), window));
  for (const int fd : {client, accepted, late}) close(fd);
}

TEST(ListenerWatchTest, SeesTheSocketAfterItsOwnerClosedItsDescriptor) {
  auto listener = std::make_unique<Socket>(/*listening=*/true);
  const int port = listener->port();
  ListenerWatch watch({port});
  ASSERT_EQ(watch.size(), 1);
  listener.reset();  // the watch's duplicate keeps the socket listening
  const absl::Time start = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(watch.Sample(start, absl::Seconds(1)));
}

}  // namespace
}  // namespace performer::server
