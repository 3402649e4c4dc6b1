#include "server/process/listener_watch.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <vector>

#include "tests/testing/loopback_socket.h"

namespace performer::server {
namespace {

using Socket = testing::LoopbackSocket;

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
