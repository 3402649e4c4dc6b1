// TLS for the HTTP listener, from the gRPC port's files (--tls_cert_file,
// --tls_key_file, --tls_client_ca_file): an OpenSSL server context that
// Reload() rebuilds from the files (the credential reloader calls it when
// they change), so that new handshakes use renewed certificates while open
// connections go on with the context they began with.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace boost::asio::ssl {
class context;
}

namespace performer::server {

struct HttpTlsFiles {
  std::string cert_file;       // PEM certificate chain
  std::string key_file;        // PEM private key
  std::string client_ca_file;  // PEM CA bundle; empty = no client certificates
};

class HttpTls {
 public:
  // INVALID_ARGUMENT naming the file that does not load.
  static absl::StatusOr<std::unique_ptr<HttpTls>> Load(HttpTlsFiles files);

  // Rebuilds the context from the files; on error the current one stays.
  absl::Status Reload();
  // The context new connections use.
  std::shared_ptr<boost::asio::ssl::context> context() const;

 private:
  explicit HttpTls(HttpTlsFiles files) : files_(std::move(files)) {}

  const HttpTlsFiles files_;
  mutable absl::Mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> context_ ABSL_GUARDED_BY(mu_);
};

}  // namespace performer::server
