// performer.v1.Generation on gRPC's callback API: requests are validated and
// tokenized (generation_rpc.h, the path every protocol shares), then handed
// to the model's Engine; streamed tokens flow back through a RequestStream
// without blocking gRPC threads. Health status
// (grpc.health.v1) is kept by the caller (server/main.cc).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "performer/v1/generation.grpc.pb.h"
#include "server/observer/rpc_observer.h"
#include "server/repository/model_repository.h"
#include "server/security/security_observer.h"
#include "server/security/token_authenticator.h"
#include "server/service/generation_rpc.h"

namespace performer::server {

struct ServiceOptions {
  int64_t stream_buffer_tokens = 1024;  // slow-reader bound per stream
  int64_t stream_interval = 1;          // tokens per streamed message (--stream_interval)
  std::vector<RpcObserver*> observers;  // not owned: metrics, request log
  // Who calls: the bearer tokens the server's call gate checks
  // (server/security/call_gate.h), read again here for the caller's name
  // and permissions. Not owned; null = every caller is anonymous.
  const TokenAuthenticator* tokens = nullptr;
  // The highest queue priority a caller without the "priority" permission
  // may ask for; above it PERMISSION_DENIED.
  int32_t max_priority_unprivileged = 0;
  SecurityObserver* security_observer = nullptr;  // not owned; may be null
  SessionPeers* peers = nullptr;                  // not owned; null = sessions do not move in
};

// How a generation served with `options` starts (StartGeneration): its
// answer streamed, or sent whole.
inline GenerationStart StartSettings(const ServiceOptions& options, bool streamed) {
  GenerationStart start;
  if (streamed) {
    start.buffer_tokens = options.stream_buffer_tokens;
    start.tokens_per_message = options.stream_interval;
  }
  start.tokens = options.tokens;
  start.max_priority_unprivileged = options.max_priority_unprivileged;
  start.security_observer = options.security_observer;
  start.peers = options.peers;
  return start;
}

class GenerationService final : public performer::v1::Generation::CallbackService {
 public:
  GenerationService(ModelRepository& repository, ServiceOptions options);

  grpc::ServerWriteReactor<v1::GenerateResponse>* GenerateStream(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const v1::CancelRequest* request,
                                   v1::CancelResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* Embed(grpc::CallbackServerContext* context,
                                  const v1::EmbedRequest* request,
                                  v1::EmbedResponse* response) override;
  grpc::ServerUnaryReactor* DeleteSession(grpc::CallbackServerContext* context,
                                          const v1::DeleteSessionRequest* request,
                                          v1::DeleteSessionResponse* response) override;
  grpc::ServerUnaryReactor* ExportSession(grpc::CallbackServerContext* context,
                                          const v1::ExportSessionRequest* request,
                                          v1::SessionState* response) override;
  grpc::ServerUnaryReactor* ImportSession(grpc::CallbackServerContext* context,
                                          const v1::ImportSessionRequest* request,
                                          v1::ImportSessionResponse* response) override;
  grpc::ServerUnaryReactor* TakeSession(grpc::CallbackServerContext* context,
                                        const v1::TakeSessionRequest* request,
                                        v1::SessionState* response) override;

 private:
  ModelRepository& repository_;
  const ServiceOptions options_;
};

}  // namespace performer::server
