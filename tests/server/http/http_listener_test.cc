#include "server/http/http_listener.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace performer::server {
namespace {

// A blocking client socket with a receive timeout.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~Client() { Close(); }
  bool connected() const { return connected_; }
  void Send(const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<size_t>(n);
    }
  }
  // Reads until `until` has been seen (empty: until the server closes) or
  // the timeout.
  std::string Read(const std::string& until = "") {
    std::string out;
    char buffer[4096];
    while (until.empty() || out.find(until) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) break;
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

HttpListenerOptions Options() {
  HttpListenerOptions options;
  options.host = "127.0.0.1";
  options.max_body_bytes = 1024;
  options.error_body = [](int http, const absl::Status& status) {
    return std::to_string(http) + " " + std::string(status.message());
  };
  return options;
}

std::string Post(const std::string& body, const std::string& extra = "") {
  return "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n" + extra + "\r\n" + body;
}

TEST(HttpListenerTest, AnswersRequestsOneAfterAnotherOnAKeptConnection) {
  auto listener = HttpListener::Start(
      Options(), [](const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange) {
        exchange->Respond(200, "text/plain",
                          request.method + " " + request.target + " " + request.body + " " +
                              std::string(request.Header("x-test")));
      });
  ASSERT_TRUE(listener.ok()) << listener.status();
  Client client((*listener)->port());
  ASSERT_TRUE(client.connected());
  client.Send(Post("one", "X-Test: a\r\n"));
  const std::string first = client.Read("POST /echo one a");
  EXPECT_EQ(first.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << first;
  EXPECT_NE(first.find("Content-Length: 16\r\n"), std::string::npos) << first;
  client.Send(Post("two"));
  EXPECT_NE(client.Read("POST /echo two ").find("POST /echo two "), std::string::npos);
}

TEST(HttpListenerTest, StreamsChunksByteForByte) {
  auto listener = HttpListener::Start(
      Options(), [](const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
        exchange->StartStream("text/event-stream", {{"X-Request-Id", "r1"}});
        exchange->Write("data: a\n\n", [exchange] {
          exchange->Write("data: [DONE]\n\n", nullptr);
          exchange->EndStream();
        });
      });
  ASSERT_TRUE(listener.ok()) << listener.status();
  Client client((*listener)->port());
  client.Send(Post("", "Connection: close\r\n"));
  const std::string got = client.Read();
  EXPECT_EQ(got,
            "HTTP/1.1 200 OK\r\nServer: performer-serve\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nX-Request-Id: r1\r\n"
            "Connection: close\r\n\r\n"
            "9\r\ndata: a\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n");
}

TEST(HttpListenerTest, RefusesOversizedBodiesHeadersAndMalformedRequests) {
  std::atomic<int> handled{0};
  auto listener = HttpListener::Start(
      Options(), [&handled](const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
        ++handled;
        exchange->Respond(200, "text/plain", "ok");
      });
  ASSERT_TRUE(listener.ok()) << listener.status();
  {
    Client client((*listener)->port());
    client.Send(Post(std::string(2000, 'x')));
    const std::string got = client.Read();
    EXPECT_EQ(got.rfind("HTTP/1.1 413 ", 0), 0u) << got;
    EXPECT_NE(got.find("413 request body: larger than 1024 bytes"), std::string::npos) << got;
  }
  {
    Client client((*listener)->port());
    client.Send(Post("", "X-Big: " + std::string(20000, 'h') + "\r\n"));
    const std::string got = client.Read();
    EXPECT_EQ(got.rfind("HTTP/1.1 431 ", 0), 0u) << got;
  }
  {
    Client client((*listener)->port());
    client.Send("NOT HTTP AT ALL\r\n\r\n");
    const std::string got = client.Read();
    EXPECT_EQ(got.rfind("HTTP/1.1 400 ", 0), 0u) << got;
  }
  EXPECT_EQ(handled.load(), 0);
}

TEST(HttpListenerTest, AClientThatGoesAwayIsReported) {
  std::mutex mu;
  std::shared_ptr<HttpExchange> held;
  std::atomic<bool> gone{false};
  auto listener = HttpListener::Start(
      Options(), [&](const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
        exchange->OnClientGone([&gone] { gone = true; });
        std::lock_guard<std::mutex> lock(mu);
        held = exchange;  // never answered
      });
  ASSERT_TRUE(listener.ok()) << listener.status();
  {
    Client client((*listener)->port());
    client.Send(Post("x"));
    for (int i = 0; i < 500; ++i) {
      std::lock_guard<std::mutex> lock(mu);
      if (held != nullptr) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  for (int i = 0; i < 500 && !gone; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(gone);
  // The exchange outlives its connection harmlessly.
  std::lock_guard<std::mutex> lock(mu);
  held->Respond(200, "text/plain", "late");
}

TEST(HttpListenerTest, ConnectionsOverTheBoundAre503AndIdleOnesClose) {
  HttpListenerOptions options = Options();
  options.max_connections = 1;
  options.idle_timeout = absl::Milliseconds(300);
  auto listener = HttpListener::Start(
      options, [](const HttpRequest&, const std::shared_ptr<HttpExchange>& exchange) {
        exchange->Respond(200, "text/plain", "ok");
      });
  ASSERT_TRUE(listener.ok()) << listener.status();
  Client first((*listener)->port());
  first.Send(Post("a"));
  EXPECT_NE(first.Read("ok").find("200 OK"), std::string::npos);
  Client second((*listener)->port());
  const std::string refused = second.Read();
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 ", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1\r\n"), std::string::npos) << refused;
  // The first, idle, is closed after the idle timeout: Read returns at the close.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(first.Read(), "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

TEST(HttpListenerTest, BadHostOrTakenPortIsAnError) {
  HttpListenerOptions options = Options();
  options.host = "not-an-address";
  EXPECT_EQ(HttpListener::Start(options, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto listener = HttpListener::Start(Options(), nullptr);
  ASSERT_TRUE(listener.ok());
  options = Options();
  options.port = (*listener)->port();
  EXPECT_EQ(HttpListener::Start(options, nullptr).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace performer::server
