#include "server/security/tls_credentials.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "server/security/token_file.h"

namespace performer::server {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Cert = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio MemoryBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The first certificate of a PEM file and how many it holds.
absl::Status ReadCertificates(const std::string& flag, const std::string& path, Cert* first) {
  absl::StatusOr<std::string> text = ReadSecretFile(path);
  if (!text.ok())
    return absl::Status(text.status().code(), absl::StrCat(flag, ": ", text.status().message()));
  Bio bio = MemoryBio(*text);
  int count = 0;
  while (true) {
    Cert cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    if (count++ == 0 && first != nullptr) *first = std::move(cert);
  }
  ERR_clear_error();
  if (count == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTlsFiles(const TlsFiles& files) {
  Cert cert;
  if (absl::Status s = ReadCertificates("--tls_cert_file", files.cert_file, &cert); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> key_text = ReadSecretFile(files.key_file);
  if (!key_text.ok()) {
    return absl::Status(key_text.status().code(),
                        absl::StrCat("--tls_key_file: ", key_text.status().message()));
  }
  Bio bio = MemoryBio(*key_text);
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls_key_file: ", files.key_file, " holds no unencrypted PEM private key"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("--tls_key_file: ", files.key_file,
                                                   " is not the key of the first certificate of ",
                                                   files.cert_file));
  }
  if (!files.client_ca_file.empty()) {
    return ReadCertificates("--tls_client_ca_file", files.client_ca_file, nullptr);
  }
  return absl::OkStatus();
}

grpc_server_credentials* NewTlsCoreCredentials(const TlsFiles& files, int refresh_seconds) {
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider;
  if (files.client_ca_file.empty()) {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        files.key_file, files.cert_file, refresh_seconds);
  } else {
    provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        files.key_file, files.cert_file, files.client_ca_file, refresh_seconds);
  }
  // The options hand their core object, and a reference to the provider's,
  // to the credentials (as grpc++'s TlsServerCredentials does).
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files.client_ca_file.empty()) {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return grpc_tls_server_credentials_create(options.c_credentials_options());
}

}  // namespace performer::server
