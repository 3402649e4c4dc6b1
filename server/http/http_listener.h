// The HTTP/1.1 listener (--http_port): Boost.Beast over Asio, a few threads
// serving any number of connections, each a chain of asynchronous
// operations on its own strand. The listener knows no API: it reads a
// request (headers at most kMaxHeaderBytes, body at most max_body_bytes,
// both within the timeouts) and hands it to the handler with an
// HttpExchange, through which the handler answers once, at once or later,
// as a whole or as an event stream (chunked transfer encoding).
//
// Bounds: connections beyond max_connections are answered 503 and closed; a
// request's headers must arrive within header_timeout and an idle
// keep-alive connection is closed after idle_timeout; one write may take at
// most write_timeout (a client that stops reading is disconnected, which
// cancels its request). A body over the bound is answered 413, headers over
// theirs 431, a malformed request 400; each then closes the connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace performer::server {

inline constexpr int64_t kMaxHeaderBytes = 16 << 10;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // the path with its query
  std::string body;
  std::string peer;                                          // ip:port
  std::vector<std::pair<std::string, std::string>> headers;  // names lower case

  // The first header of that (lower-case) name; empty when absent.
  std::string_view Header(std::string_view name) const;
  // The target without its query.
  std::string Path() const { return target.substr(0, target.find('?')); }
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// One request's answer. Every method but Post must run on the exchange's
// strand: in the handler call itself, or in a function given to Post.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  // Runs `task` on the exchange's strand (from any thread). The task runs
  // even after the client went away (the exchange then discards output),
  // but not after the listener stopped (it is then dropped).
  virtual void Post(std::function<void()> task) = 0;
  // The whole answer.
  virtual void Respond(int status, std::string_view content_type, std::string body,
                       const HttpHeaders& headers = {}) = 0;
  // Starts a 200 answer of unknown length (text/event-stream, chunked).
  virtual void StartStream(std::string_view content_type, const HttpHeaders& headers = {}) = 0;
  // Sends one piece of the stream; `written` runs on the strand once it is
  // on the wire (or the client is gone; after the listener stopped, at once
  // on the caller's thread). One write at a time.
  virtual void Write(std::string data, std::function<void()> written) = 0;
  // Ends the stream.
  virtual void EndStream() = 0;
  // `gone` runs once on the strand when the client disconnects before the
  // answer has ended (not after).
  virtual void OnClientGone(std::function<void()> gone) = 0;
  // Keeps `owner` (what makes the answer) alive until the answer has ended
  // or the connection is closed.
  virtual void Keep(std::shared_ptr<void> owner) = 0;
};

using HttpHandler =
    std::function<void(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange)>;

class HttpTls;

struct HttpListenerOptions {
  // HTTPS with this context (not owned; null = plaintext).
  const HttpTls* tls = nullptr;
  // The body of the listener's own errors (413, 431, 400, 503), in the
  // API's error shape; `status` says what was wrong.
  std::function<std::string(int http_status, const absl::Status& status)> error_body;
  std::string host = "0.0.0.0";
  int32_t port = 0;  // 0 = a free port
  int32_t threads = 2;
  int64_t max_body_bytes = 4 << 20;
  int64_t max_connections = 10000;
  absl::Duration header_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration write_timeout = absl::Seconds(60);
};

class HttpListener {
 public:
  // Binds and starts serving; UNAVAILABLE naming the address when it cannot
  // bind, INVALID_ARGUMENT for a host that is not an IP address.
  static absl::StatusOr<std::unique_ptr<HttpListener>> Start(const HttpListenerOptions& options,
                                                             HttpHandler handler);
  ~HttpListener();  // Stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  int port() const;
  int64_t open_connections() const;
  // Stops accepting, closes every connection and joins the threads (once
  // the connections' operations have ended, at most about 5 s). An exchange
  // still held elsewhere stays valid: its writes are dropped.
  void Stop();

  struct State;

 private:
  explicit HttpListener(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

}  // namespace performer::server
