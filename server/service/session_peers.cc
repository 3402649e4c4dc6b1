#include "server/service/session_peers.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "performer/v1/generation.grpc.pb.h"
#include "server/engine/engine.h"

namespace performer::server {
namespace {

constexpr char kDnsScheme[] = "dns:///";

// Splits "host:port" or "[v6]:port".
bool SplitHostPort(const std::string& entry, std::string* host, std::string* port) {
  const size_t colon = entry.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == entry.size()) return false;
  *host = entry.substr(0, colon);
  *port = entry.substr(colon + 1);
  if (absl::StartsWith(*host, "[")) {
    if (!absl::EndsWith(*host, "]")) return false;
    *host = host->substr(1, host->size() - 2);
  }
  int number = 0;
  return !host->empty() && absl::SimpleAtoi(*port, &number) && number > 0 && number < 65536;
}

std::string Numeric(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(address)->sin_addr, text,
              sizeof(text));
  } else if (address->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr, text,
              sizeof(text));
  }
  return text;
}

// Every address of `host`, numeric.
std::vector<std::string> Resolve(const std::string& host) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::vector<std::string> out;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return out;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    std::string text = Numeric(a->ai_addr);
    if (!text.empty()) out.push_back(std::move(text));
  }
  freeaddrinfo(found);
  return out;
}

// The numeric addresses of this host's interfaces.
std::set<std::string> LocalAddresses() {
  std::set<std::string> out;
  ifaddrs* interfaces = nullptr;
  if (getifaddrs(&interfaces) != 0) return out;
  for (ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr != nullptr) out.insert(Numeric(i->ifa_addr));
  }
  freeifaddrs(interfaces);
  return out;
}

std::string JoinHostPort(const std::string& host, const std::string& port) {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", port)
                                             : absl::StrCat(host, ":", port);
}

}  // namespace

std::string FingerprintText(const decoding::ModelFingerprint& fingerprint) {
  return absl::StrCat(fingerprint.model, "/", fingerprint.config_hash, "/",
                      fingerprint.weights_hash);
}

absl::Status ValidatePeerEntry(const std::string& entry) {
  std::string host;
  std::string port;
  const std::string address =
      absl::StartsWith(entry, kDnsScheme) ? entry.substr(sizeof(kDnsScheme) - 1) : entry;
  if (!SplitHostPort(address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session_peers: \"", entry,
                     "\" is not host:port or dns:///name:port (a port from 1 to 65535)"));
  }
  return absl::OkStatus();
}

SessionPeers::SessionPeers(SessionPeerOptions options) : options_(std::move(options)) {}

void SessionPeers::SetSelfPort(int port) {
  absl::MutexLock lock(&mu_);
  self_port_ = port;
}

std::vector<SessionPeers::Peer> SessionPeers::Peers() const {
  int self_port;
  {
    absl::MutexLock lock(&mu_);
    self_port = self_port_;
  }
  const std::set<std::string> local = LocalAddresses();
  std::vector<Peer> out;
  std::set<std::string> seen;
  for (const std::string& entry : options_.peers) {
    std::string host;
    std::string port;
    const bool dns = absl::StartsWith(entry, kDnsScheme);
    if (!SplitHostPort(dns ? entry.substr(sizeof(kDnsScheme) - 1) : entry, &host, &port)) continue;
    int number = 0;
    const bool own_port = absl::SimpleAtoi(port, &number) && number == self_port;
    // A static entry is resolved too, to recognise this replica in it; it
    // is asked by its name.
    for (const std::string& ip : Resolve(host)) {
      if (own_port && local.count(ip) > 0) {
        if (dns) continue;
        break;
      }
      const std::string address = dns ? JoinHostPort(ip, port) : entry;
      if (seen.insert(address).second) out.push_back({address, dns ? host : ""});
      if (!dns) break;
    }
  }
  return out;
}

std::shared_ptr<grpc::Channel> SessionPeers::ChannelTo(const Peer& peer) {
  const std::string& address = peer.address;
  absl::MutexLock lock(&mu_);
  auto it = channels_.find(address);
  if (it != channels_.end()) return it->second;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options_.ca_pem.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.ca_pem;
    ssl.pem_cert_chain = options_.cert_pem;
    ssl.pem_private_key = options_.key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options_.max_message_bytes);
  if (!options_.ca_pem.empty() && !peer.tls_name.empty()) {
    arguments.SetSslTargetNameOverride(peer.tls_name);
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(address, credentials, arguments);
  channels_[address] = channel;
  return channel;
}

absl::Status SessionPeers::Fetch(Engine& engine, const std::string& session_id,
                                 const std::string& owner) {
  const std::vector<Peer> peers = Peers();
  {
    // Channels of peers that are gone are closed.
    absl::MutexLock lock(&mu_);
    std::set<std::string> now;
    for (const Peer& peer : peers) now.insert(peer.address);
    for (auto it = channels_.begin(); it != channels_.end();) {
      it = now.count(it->first) > 0 ? std::next(it) : channels_.erase(it);
    }
  }
  v1::TakeSessionRequest request;
  request.set_model(engine.model_name());
  request.set_session_id(session_id);
  request.set_owner(owner);
  request.set_fingerprint(FingerprintText(engine.fingerprint()));
  std::vector<std::string> unreachable;
  bool silent = false;  // a peer that did not answer in time may hold it
  for (const Peer& peer : peers) {
    const std::string& address = peer.address;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
    if (!options_.token.empty()) {
      context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
    }
    v1::SessionState moved;
    const grpc::Status status =
        v1::Generation::NewStub(ChannelTo(peer))->TakeSession(&context, request, &moved);
    switch (status.error_code()) {
      case grpc::StatusCode::OK: {
        absl::StatusOr<int64_t> position =
            engine.ImportSession(session_id, moved.data(), owner, /*moved_in=*/true);
        return position.ok() ? absl::OkStatus() : position.status();
      }
      case grpc::StatusCode::NOT_FOUND:
      case grpc::StatusCode::FAILED_PRECONDITION:  // another model: it stays there
        continue;
      case grpc::StatusCode::ABORTED:
        return absl::UnavailableError(absl::StrCat(
            "session ", session_id, " of model ", engine.model_name(), " is held by peer ", address,
            ", where a turn of it is still running; retry when it ends"));
      case grpc::StatusCode::DEADLINE_EXCEEDED:
        silent = true;
        [[fallthrough]];
      default:
        unreachable.push_back(absl::StrCat(address, " (", status.error_message(), ")"));
    }
  }
  if (unreachable.empty())
    return absl::NotFoundError(absl::StrCat("no peer holds session ", session_id));
  const std::string message =
      absl::StrCat("no peer that answered holds session ", session_id,
                   "; peers that did not answer: ", absl::StrJoin(unreachable, ", "));
  return silent ? absl::DeadlineExceededError(message) : absl::NotFoundError(message);
}

}  // namespace performer::server
