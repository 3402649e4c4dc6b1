// The peer replicas that a session can move from. Where a turn names a
// session this replica does not hold, SessionPeers asks each peer to move it
// here (TakeSession: the peer hands over its bytes and forgets it, so that
// exactly one replica holds a session), then imports it into the model's
// engine. The peers are a fixed list of addresses and DNS names resolved at
// each ask (a Kubernetes headless Service lists its pods so); this replica's
// own address is left out. Peer calls carry this replica's bearer token and,
// with a CA, run over TLS (mutual where this replica has a certificate).
//
// A move runs on the RPC's thread before the turn is queued: each peer gets
// at most `timeout`, so a move costs at most peers x timeout.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/decoding/model_fingerprint.h"
#include "grpcpp/channel.h"

namespace performer::server {

class Engine;

struct SessionPeerOptions {
  // "host:port" entries, and "dns:///name:port" entries resolved to every
  // address of the name at each ask.
  std::vector<std::string> peers;
  std::string token;     // bearer token presented to peers; "" = none
  std::string ca_pem;    // roots that sign the peers' certificates; "" = plaintext
  std::string cert_pem;  // this replica's certificate for mutual TLS; "" = none
  std::string key_pem;
  absl::Duration timeout = absl::Seconds(2);  // per peer
  // The largest session accepted from a peer (a state and its tokens).
  int max_message_bytes = 1 << 30;
};

// The fingerprint as TakeSessionRequest.fingerprint carries it:
// "model/config_hash/weights_hash".
std::string FingerprintText(const decoding::ModelFingerprint& fingerprint);

// "host:port" with a bracketed IPv6 host, or an error naming the entry:
// the checks of one --session_peers entry.
absl::Status ValidatePeerEntry(const std::string& entry);

class SessionPeers {
 public:
  explicit SessionPeers(SessionPeerOptions options);
  SessionPeers(const SessionPeers&) = delete;
  SessionPeers& operator=(const SessionPeers&) = delete;

  bool enabled() const { return !options_.peers.empty(); }
  // This replica's gRPC port, known once it listens: a peer address on one
  // of this host's interfaces with this port is this replica itself.
  void SetSelfPort(int port);

  // Moves `owner`'s session `session_id` of `engine`'s model here. OK once
  // imported; NOT_FOUND when no peer that answered holds it and the others
  // are down or refused the call (the message names them: a replica that
  // refuses connections holds no session in memory); DEADLINE_EXCEEDED when
  // no peer that answered holds it but one did not answer within the
  // timeout, so it may hold it (the message names the peers that did not
  // answer); UNAVAILABLE when a peer holds it but cannot hand it over now (a
  // turn of it runs there): the caller retries; another error of the import
  // as it is.
  absl::Status Fetch(Engine& engine, const std::string& session_id, const std::string& owner);

 private:
  struct Peer {
    std::string address;  // what is dialled
    // The name its certificate is checked against: a dns:/// entry's name
    // (its pods are dialled by IP); empty = the address's host.
    std::string tls_name;
  };
  // The peers now, this replica's own left out.
  std::vector<Peer> Peers() const;
  std::shared_ptr<grpc::Channel> ChannelTo(const Peer& peer);

  const SessionPeerOptions options_;
  mutable absl::Mutex mu_;
  int self_port_ ABSL_GUARDED_BY(mu_) = -1;
  std::unordered_map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace performer::server
