#include "server/http/http_listener.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <deque>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/engine/thread_name.h"
#include "server/http/http_tls.h"

namespace performer::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

beast::tcp_stream MakeStream(tcp::socket socket, beast::tcp_stream*, asio::ssl::context*) {
  return beast::tcp_stream(std::move(socket));
}
TlsStream MakeStream(tcp::socket socket, TlsStream*, asio::ssl::context* context) {
  return TlsStream(std::move(socket), *context);
}

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return absl::ToChronoNanoseconds(d);
}

}  // namespace

// What the listener holds of a connection, whatever its stream.
class HttpConnectionBase : public HttpExchange {
 public:
  virtual void Start() = 0;
  // From Stop(): closes the connection on its strand and drops what ties
  // the answer's owner to it.
  virtual void ShutdownSoon() = 0;
};

// Shared by the listener and every connection (each holds it), so that it
// and its io_context outlive the last connection, wherever that is held.
struct HttpListener::State : std::enable_shared_from_this<HttpListener::State> {
  HttpListenerOptions options;
  HttpHandler handler;
  // Before the io_context: connections the context's handlers still own
  // count down while it is destroyed.
  std::atomic<int64_t> connections{0};
  // Set by Stop(): tasks are no longer posted, and a closed connection runs
  // a write's callback at once.
  std::atomic<bool> stopped{false};
  std::atomic<int> running_threads{0};
  absl::Mutex mu;
  std::vector<std::weak_ptr<HttpConnectionBase>> open ABSL_GUARDED_BY(mu);
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  int port = 0;

  void Accept();
  void Track(const std::shared_ptr<HttpConnectionBase>& connection);
};

// One connection over Stream (plain TCP or TLS): reads requests one after
// another, and while one is being answered, keeps a read pending on the
// socket, which tells a client that went away (end of stream) from one that
// sends its next request early.
template <class Stream>
class HttpConnection final : public HttpConnectionBase,
                             public std::enable_shared_from_this<HttpConnection<Stream>> {
 public:
  static constexpr bool kTls = std::is_same_v<Stream, TlsStream>;

  HttpConnection(std::shared_ptr<HttpListener::State> state, tcp::socket socket,
                 std::shared_ptr<asio::ssl::context> tls)
      : state_(std::move(state)),
        tls_(std::move(tls)),
        stream_(MakeStream(std::move(socket), static_cast<Stream*>(nullptr), tls_.get())),
        timer_(stream_.get_executor()) {
    ++state_->connections;
    beast::error_code ec;
    const tcp::endpoint remote = Socket().remote_endpoint(ec);
    if (!ec) peer_ = absl::StrCat(remote.address().to_string(), ":", remote.port());
  }
  ~HttpConnection() override { --state_->connections; }

  void Start() override {
    if constexpr (kTls) {
      Arm(state_->options.header_timeout);
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                self->timer_.cancel();
                                if (ec) {
                                  self->Close();
                                } else {
                                  self->Begin();
                                }
                              });
    } else {
      Begin();
    }
  }

  void Begin() {
    if (state_->connections > state_->options.max_connections) {
      answering_ = true;
      keep_alive_ = false;
      Fail(503,
           absl::UnavailableError(absl::StrCat("too many connections (at most ",
                                               state_->options.max_connections, "); retry later")));
      return;
    }
    DoRead();
  }

  void ShutdownSoon() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      self->gone_ = nullptr;
      self->keep_.reset();
      self->Close();
    });
  }

  // Once the listener stopped, no thread runs tasks: they are dropped (and
  // with them what they hold).
  void Post(std::function<void()> task) override {
    if (state_->stopped) return;
    asio::post(stream_.get_executor(), std::move(task));
  }

  void Respond(int status, std::string_view content_type, std::string body,
               const HttpHeaders& headers) override {
    http::response<http::string_body> response{static_cast<http::status>(status), 11};
    response.set(http::field::server, "performer-serve");
    response.set(http::field::content_type,
                 beast::string_view(content_type.data(), content_type.size()));
    for (const auto& [name, value] : headers) response.set(name, value);
    response.keep_alive(keep_alive_);
    response.body() = std::move(body);
    response.prepare_payload();
    std::ostringstream out;
    out << response;
    Send(out.str(), [self = this->shared_from_this()] { self->AnswerDone(); });
  }

  void StartStream(std::string_view content_type, const HttpHeaders& headers) override {
    std::string head =
        absl::StrCat("HTTP/1.1 200 OK\r\nServer: performer-serve\r\nContent-Type: ",
                     absl::string_view(content_type.data(), content_type.size()),
                     "\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n");
    for (const auto& [name, value] : headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
    if (!keep_alive_) head += "Connection: close\r\n";
    head += "\r\n";
    Send(std::move(head), nullptr);
  }

  void Write(std::string data, std::function<void()> written) override {
    if (data.empty()) {
      if (written) Post(std::move(written));
      return;
    }
    Send(absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n"), std::move(written));
  }

  void EndStream() override {
    Send("0\r\n\r\n", [self = this->shared_from_this()] { self->AnswerDone(); });
  }

  void OnClientGone(std::function<void()> gone) override { gone_ = std::move(gone); }

  void Keep(std::shared_ptr<void> owner) override { keep_ = std::move(owner); }

 private:
  void DoRead() {
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(state_->options.max_body_bytes));
    parser_->header_limit(static_cast<uint32_t>(kMaxHeaderBytes));
    Arm(buffer_.size() > 0 ? state_->options.header_timeout : state_->options.idle_timeout);
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    timer_.cancel();
    if (ec) {
      OnReadError(ec);
      return;
    }
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.peer = peer_;
    for (const auto& field : message) {
      request.headers.emplace_back(absl::AsciiStrToLower(std::string(field.name_string())),
                                   std::string(field.value()));
    }
    request.body = std::move(message.body());
    keep_alive_ = message.keep_alive();
    answering_ = true;
    Watch();
    state_->handler(request, this->shared_from_this());
  }

  void OnReadError(beast::error_code ec) {
    if (closed_) return;
    const bool started = parser_.has_value() && parser_->got_some();
    keep_alive_ = false;
    if (ec == http::error::body_limit) {
      Fail(413, absl::InvalidArgumentError(absl::StrCat("request body: larger than ",
                                                        state_->options.max_body_bytes,
                                                        " bytes (--max_message_bytes)")));
    } else if (ec == http::error::header_limit) {
      Fail(431, absl::InvalidArgumentError(
                    absl::StrCat("request headers: larger than ", kMaxHeaderBytes, " bytes")));
    } else if (started && ec != http::error::end_of_stream && ec != asio::error::eof &&
               ec != asio::error::operation_aborted && ec != asio::error::connection_reset) {
      Fail(400, absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", ec.message())));
    } else {
      Close();
    }
  }

  // The listener's own refusal; the connection closes after it.
  void Fail(int http_status, const absl::Status& status) {
    answering_ = true;
    keep_alive_ = false;
    const HttpListenerOptions& options = state_->options;
    Respond(http_status, "application/json",
            options.error_body ? options.error_body(http_status, status)
                               : std::string(status.message()),
            http_status == 503 ? HttpHeaders{{"Retry-After", "1"}} : HttpHeaders{});
  }

  // A read pending while the answer is made: end of stream is a client that
  // went away; data is its next request, begun early.
  void Watch() {
    if (buffer_.size() > 0 || watching_) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->watching_ = false;
                              if (ec) {
                                if (self->answering_) {
                                  self->ClientGone();
                                } else {
                                  self->Close();
                                }
                                return;
                              }
                              self->buffer_.commit(n);
                              if (!self->answering_ && !self->closed_) self->DoRead();
                            });
  }

  void ClientGone() {
    if (std::function<void()> gone = std::move(gone_)) {
      gone_ = nullptr;
      gone();
    }
    Close();
  }

  void AnswerDone() {
    answering_ = false;
    gone_ = nullptr;
    keep_.reset();
    if (closed_) return;
    if (!keep_alive_) {
      Close();
    } else if (watching_) {
      Arm(state_->options.idle_timeout);  // the pending read is the wait for the next request
    } else {
      DoRead();
    }
  }

  // Writes queue: one on the wire at a time, each within write_timeout.
  void Send(std::string data, std::function<void()> written) {
    if (closed_) {
      if (written && state_->stopped) {
        written();
      } else if (written) {
        Post(std::move(written));
      }
      return;
    }
    out_.emplace_back(std::move(data), std::move(written));
    if (out_.size() == 1) WriteNext();
  }

  void WriteNext() {
    Arm(state_->options.write_timeout);
    asio::async_write(
        stream_, asio::buffer(out_.front().first),
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
  }

  void OnWritten(beast::error_code ec) {
    timer_.cancel();
    std::function<void()> written = std::move(out_.front().second);
    out_.pop_front();
    if (ec) {
      // Every queued callback still runs: the answer's owner ends through them.
      ClientGone();
      for (auto& [data, callback] : out_) {
        if (callback) Post(std::move(callback));
      }
      out_.clear();
    } else if (!out_.empty()) {
      WriteNext();
    }
    if (written) written();
  }

  void Arm(absl::Duration timeout) {
    timer_.expires_after(ToChrono(timeout));
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (!ec) self->ClientGone();
    });
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    beast::error_code ec;
    Socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).close();
  }

  tcp::socket& Socket() { return beast::get_lowest_layer(stream_).socket(); }

  const std::shared_ptr<HttpListener::State> state_;
  // The TLS context the connection began with (a reload does not touch it).
  const std::shared_ptr<asio::ssl::context> tls_;
  Stream stream_;
  asio::steady_timer timer_;
  beast::flat_buffer buffer_{kMaxHeaderBytes};
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<std::pair<std::string, std::function<void()>>> out_;
  std::string peer_;
  std::function<void()> gone_;
  std::shared_ptr<void> keep_;
  bool answering_ = false;
  bool keep_alive_ = true;
  bool watching_ = false;
  bool closed_ = false;
};

std::string_view HttpRequest::Header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return {};
}

void HttpListener::State::Accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      std::shared_ptr<HttpConnectionBase> connection;
      if (options.tls != nullptr) {
        connection = std::make_shared<HttpConnection<TlsStream>>(
            shared_from_this(), std::move(socket), options.tls->context());
      } else {
        connection = std::make_shared<HttpConnection<beast::tcp_stream>>(
            shared_from_this(), std::move(socket), nullptr);
      }
      Track(connection);
      connection->Post([connection] { connection->Start(); });
    }
    Accept();
  });
}

void HttpListener::State::Track(const std::shared_ptr<HttpConnectionBase>& connection) {
  absl::MutexLock lock(&mu);
  // Forget closed connections now and then, so that the list stays the
  // size of the open ones.
  if (open.size() >= 64 && open.size() % 64 == 0) {
    open.erase(
        std::remove_if(open.begin(), open.end(),
                       [](const std::weak_ptr<HttpConnectionBase>& c) { return c.expired(); }),
        open.end());
  }
  open.push_back(connection);
}

absl::StatusOr<std::unique_ptr<HttpListener>> HttpListener::Start(
    const HttpListenerOptions& options, HttpHandler handler) {
  auto state = std::make_shared<State>();
  state->options = options;
  state->handler = std::move(handler);
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options.host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--host: \"", options.host, "\" is not an IP address (", ec.message(), ")"));
  }
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(options.port));
  state->acceptor.open(endpoint.protocol(), ec);
  if (!ec) state->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) state->acceptor.bind(endpoint, ec);
  if (!ec) state->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("--http_port: cannot listen on ", options.host, ":",
                                               options.port, ": ", ec.message()));
  }
  state->port = state->acceptor.local_endpoint().port();
  state->work.emplace(state->ioc.get_executor());
  state->Accept();
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    ++state->running_threads;
    state->threads.emplace_back([s = state.get(), i] {
      NameThisThread(absl::StrCat("http-", i));
      s->ioc.run();
      --s->running_threads;
    });
  }
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(state)));
}

HttpListener::~HttpListener() { Stop(); }

int HttpListener::port() const { return state_->port; }

int64_t HttpListener::open_connections() const { return state_->connections.load(); }

void HttpListener::Stop() {
  if (state_->stopped.exchange(true)) return;
  asio::post(state_->ioc, [s = state_.get()] {
    beast::error_code ec;
    s->acceptor.close(ec);
  });
  std::vector<std::shared_ptr<HttpConnectionBase>> open;
  {
    absl::MutexLock lock(&state_->mu);
    for (const auto& weak : state_->open) {
      if (auto c = weak.lock()) open.push_back(std::move(c));
    }
    state_->open.clear();
  }
  for (const auto& c : open) c->ShutdownSoon();
  open.clear();
  // The threads return once every connection's operations have ended (the
  // closes abort them); past a bound, they are stopped.
  state_->work.reset();
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (state_->running_threads > 0 && absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(5));
  if (state_->running_threads > 0) state_->ioc.stop();
  for (std::thread& t : state_->threads) t.join();
}

}  // namespace performer::server
