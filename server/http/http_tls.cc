#include "server/http/http_tls.h"

#include <boost/asio/ssl/context.hpp>
#include <utility>

#include "absl/strings/str_cat.h"

namespace performer::server {
namespace {

namespace ssl = boost::asio::ssl;

absl::StatusOr<std::shared_ptr<ssl::context>> Build(const HttpTlsFiles& files) {
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::single_dh_use);
  boost::system::error_code ec;
  const auto failed = [&ec](const char* flag, const std::string& path) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " does not load for HTTPS: ", ec.message()));
  };
  if (context->use_certificate_chain_file(files.cert_file, ec)) {
    return failed("--tls_cert_file", files.cert_file);
  }
  if (context->use_private_key_file(files.key_file, ssl::context::pem, ec)) {
    return failed("--tls_key_file", files.key_file);
  }
  if (!files.client_ca_file.empty()) {
    if (context->load_verify_file(files.client_ca_file, ec)) {
      return failed("--tls_client_ca_file", files.client_ca_file);
    }
    context->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return context;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpTls>> HttpTls::Load(HttpTlsFiles files) {
  std::unique_ptr<HttpTls> tls(new HttpTls(std::move(files)));
  if (absl::Status s = tls->Reload(); !s.ok()) return s;
  return tls;
}

absl::Status HttpTls::Reload() {
  absl::StatusOr<std::shared_ptr<ssl::context>> built = Build(files_);
  if (!built.ok()) return built.status();
  absl::MutexLock lock(&mu_);
  context_ = *std::move(built);
  return absl::OkStatus();
}

std::shared_ptr<ssl::context> HttpTls::context() const {
  absl::MutexLock lock(&mu_);
  return context_;
}

}  // namespace performer::server
