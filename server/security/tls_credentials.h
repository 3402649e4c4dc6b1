// TLS for the gRPC port: the server's certificate chain and key, and for
// mutual TLS the CA that client certificates must chain to. gRPC's file
// watcher re-reads the three files every `refresh_seconds`, so renewed
// certificates (a Kubernetes Secret update) are picked up without a restart
// and without touching open connections: new handshakes use the new files,
// established connections and their streams go on.
#pragma once

#include <grpc/grpc_security.h>

#include <string>

#include "absl/status/status.h"

namespace performer::server {

struct TlsFiles {
  std::string cert_file;       // PEM certificate chain, the server's first
  std::string key_file;        // PEM private key of that certificate
  std::string client_ca_file;  // PEM CA bundle; empty = no client certificates
};

// Reads the files as the server will and checks them, so that a bad file
// fails at start-up (or a reload is reported) with a message naming it:
// each parses as PEM, the key belongs to the certificate, the CA bundle
// holds at least one certificate. INVALID_ARGUMENT or NOT_FOUND otherwise.
absl::Status CheckTlsFiles(const TlsFiles& files);

// gRPC core's TLS server credentials over a file watcher of `files`
// (refresh_seconds >= 1). With a client CA, a client must present a
// certificate that chains to it or the handshake fails; without one, no
// client certificate is asked for. The caller owns the result.
grpc_server_credentials* NewTlsCoreCredentials(const TlsFiles& files, int refresh_seconds);

}  // namespace performer::server
