// The check every call on a listening port passes before any service sees
// it: gRPC core's auth-metadata processor, which runs for every service the
// server hosts (ours and any other on the same port) and ends a refused call
// with its status before a handler is created. Two kinds of gate:
//   - bearer tokens: every call but grpc.health.v1.Health needs a valid
//     "authorization: Bearer <token>" (UNAUTHENTICATED otherwise), so that
//     probes work without a token;
//   - health only: the port answers grpc.health.v1.Health and refuses the
//     rest (PERMISSION_DENIED), for a plaintext probe port beside a TLS one.
//
// GatedServerCredentials wraps gRPC core's server credentials (plaintext or
// TLS) rather than grpc++'s: grpc++'s plaintext credentials refuse an
// auth-metadata processor, core's accept one.
#pragma once

#include <grpc/grpc_security.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/security/caller.h"
#include "server/security/security_observer.h"
#include "server/security/token_authenticator.h"

namespace performer::server {

// True for the methods every caller may use without a token: gRPC health.
bool IsOpenMethod(std::string_view path);

struct CallGate {
  // Not owned; null = no bearer tokens (every call passes, unless
  // health_only).
  const TokenAuthenticator* tokens = nullptr;
  // Refuse everything but grpc.health.v1.Health.
  bool health_only = false;
  SecurityObserver* observer = nullptr;  // not owned; may be null
};

// The gate's decision on one call, given its :path and its "authorization"
// metadata (empty when absent): OK, UNAUTHENTICATED or PERMISSION_DENIED
// with a message for the client. Reports to the gate's observer and logs
// refusals (at most one line a second).
absl::Status CheckCall(const CallGate& gate, std::string_view path, std::string_view authorization);

class GatedServerCredentials final : public grpc::ServerCredentials {
 public:
  // Takes ownership of `core`; `gate`'s pointers must outlive the server
  // (the gate itself is copied into gRPC core).
  GatedServerCredentials(grpc_server_credentials* core, CallGate gate);
  ~GatedServerCredentials() override;

  // grpc++'s processors are not used: the gate is this class's processor.
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& processor) override;

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override;
  static void Process(void* state, grpc_auth_context* context, const grpc_metadata* metadata,
                      size_t count, grpc_process_auth_metadata_done_cb done, void* user_data);

  grpc_server_credentials* const core_;
};

// Plaintext: gRPC core's insecure server credentials (the caller owns them
// until it hands them to GatedServerCredentials).
grpc_server_credentials* NewPlaintextCoreCredentials();

// The caller of a call that passed the gate: the token's caller, or the
// anonymous Caller{} when `tokens` is null. UNAUTHENTICATED when the token
// was revoked between the gate and the handler (a reload in between).
absl::StatusOr<Caller> CallerOf(const grpc::ServerContextBase& context,
                                const TokenAuthenticator* tokens);

}  // namespace performer::server
