#include "server/security/call_gate.h"

#include <grpc/grpc.h>

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/logging/server_log.h"

namespace performer::server {
namespace {

constexpr std::string_view kOpenService = "/grpc.health.v1.Health/";

std::string_view View(const grpc_slice& slice) {
  return std::string_view(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)),
                          GRPC_SLICE_LENGTH(slice));
}

}  // namespace

bool IsOpenMethod(std::string_view path) {
  return path.substr(0, kOpenService.size()) == kOpenService;
}

absl::Status CheckCall(const CallGate& gate, std::string_view path,
                       std::string_view authorization) {
  if (IsOpenMethod(path)) return absl::OkStatus();
  if (gate.health_only) {
    LogEvent(spdlog::level::debug, "call refused on the health port", {{"method", path}});
    return absl::PermissionDeniedError(
        "this port serves only grpc.health.v1.Health; use the server's main port");
  }
  if (gate.tokens == nullptr) return absl::OkStatus();
  absl::StatusOr<Caller> caller = gate.tokens->Authenticate(authorization);
  if (gate.observer != nullptr) {
    gate.observer->OnAuthentication(caller.ok() ? caller->name : "", caller.ok() ? "ok"
                                                                     : authorization.empty()
                                                                         ? "missing"
                                                                         : "invalid");
  }
  if (!caller.ok()) {
    // Debug only: a client retrying without a token would flood the log;
    // performer_auth_attempts_total counts every refusal.
    LogEvent(spdlog::level::debug, "call refused",
             {{"method", path}, {"reason", std::string(caller.status().message())}});
    return caller.status();
  }
  return absl::OkStatus();
}

GatedServerCredentials::GatedServerCredentials(grpc_server_credentials* core, CallGate gate)
    : core_(core) {
  // The processor's state is a copy of the gate that gRPC core owns (and
  // frees with the core credentials): a server may outlive this wrapper,
  // which ServerBuilder drops once the server is built.
  grpc_auth_metadata_processor processor{&GatedServerCredentials::Process,
                                         [](void* state) { delete static_cast<CallGate*>(state); },
                                         new CallGate(gate)};
  grpc_server_credentials_set_auth_metadata_processor(core_, processor);
}

GatedServerCredentials::~GatedServerCredentials() { grpc_server_credentials_release(core_); }

void GatedServerCredentials::SetAuthMetadataProcessor(
    const std::shared_ptr<grpc::AuthMetadataProcessor>& /*processor*/) {
  LogEvent(spdlog::level::critical,
           "GatedServerCredentials: SetAuthMetadataProcessor would replace the call gate");
  std::abort();
}

int GatedServerCredentials::AddPortToServer(const std::string& addr, grpc_server* server) {
  return grpc_server_add_http2_port(server, addr.c_str(), core_);
}

// Runs on gRPC's thread for the call, before any handler; answers at once
// (the token check is in memory).
void GatedServerCredentials::Process(void* state, grpc_auth_context* /*context*/,
                                     const grpc_metadata* metadata, size_t count,
                                     grpc_process_auth_metadata_done_cb done, void* user_data) {
  const auto* gate = static_cast<const CallGate*>(state);
  std::string_view path;
  std::string_view authorization;
  for (size_t i = 0; i < count; ++i) {
    const std::string_view key = View(metadata[i].key);
    if (key == ":path") path = View(metadata[i].value);
    // The first one, as CallerOf reads it.
    if (key == "authorization" && authorization.data() == nullptr) {
      authorization = View(metadata[i].value);
    }
  }
  const absl::Status status = CheckCall(*gate, path, authorization);
  if (status.ok()) {
    done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
    return;
  }
  const std::string message(status.message());
  done(user_data, nullptr, 0, nullptr, 0, static_cast<grpc_status_code>(status.code()),
       message.c_str());
}

grpc_server_credentials* NewPlaintextCoreCredentials() {
  return grpc_insecure_server_credentials_create();
}

absl::StatusOr<Caller> CallerOf(const grpc::ServerContextBase& context,
                                const TokenAuthenticator* tokens) {
  if (tokens == nullptr) return Caller{};
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const std::string_view authorization =
      it == metadata.end() ? std::string_view()
                           : std::string_view(it->second.data(), it->second.size());
  return tokens->Authenticate(authorization);
}

}  // namespace performer::server
