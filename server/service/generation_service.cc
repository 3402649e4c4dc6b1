#include "server/service/generation_service.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/decoding/sequence_decoder.h"
#include "server/engine/draining.h"
#include "server/repository/embedder.h"
#include "server/security/call_gate.h"
#include "server/service/generation_rpc.h"

namespace performer::server {
namespace {

v1::ModelKind ToWire(ModelKind kind) {
  switch (kind) {
    case ModelKind::kDecoder:
      return v1::MODEL_KIND_DECODER;
    case ModelKind::kEncoderDecoder:
      return v1::MODEL_KIND_ENCODER_DECODER;
    case ModelKind::kEncoder:
      return v1::MODEL_KIND_ENCODER;
  }
  return v1::MODEL_KIND_UNSPECIFIED;
}

// Streams one request's tokens as the engine produces them.
class StreamWriter : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  StreamWriter(grpc::CallbackServerContext* context, const std::vector<RpcObserver*>& observers)
      : link_(context, observers, "GenerateStream", kPerformerProtocol) {}

  RpcRecord& record() { return link_.scope().record(); }

  void FinishNow(const grpc::Status& status) {
    ReactorLock lock(link_.mu());
    done_ = true;
    Finish(link_.scope().Sent(status));
  }

  // `request_id` is echoed in every message.
  void Attach(const std::string& request_id, std::shared_ptr<RequestStream> stream) {
    request_id_ = request_id;
    link_.Attach(std::move(stream), [this] {
      link_.mu().AssertHeld();
      Pump();
    });
  }

  void OnWriteDone(bool ok) override {
    ReactorLock lock(link_.mu());
    writing_ = false;
    if (done_) return;
    if (!ok) {
      // The client is gone: stop generating for it.
      link_.CancelFromRpc();
      done_ = true;
      Finish(link_.scope().Sent(CancelledStatus(link_.context())));
      return;
    }
    if (final_status_.has_value()) {
      done_ = true;
      Finish(link_.scope().Sent(*final_status_));
      return;
    }
    Pump();
  }

  void OnCancel() override {
    ReactorLock lock(link_.mu());
    link_.CancelFromRpc();
  }

  void OnDone() override {
    link_.Retire();
    delete this;
  }

 private:
  // Sends whatever the engine has produced.
  void Pump() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_.mu()) {
    if (writing_ || done_ || final_status_.has_value()) return;
    RequestStream::Taken taken = link_.stream().Take();
    if (taken.chunk.empty() && !taken.summary.has_value()) return;
    if (taken.summary.has_value()) record().summary = *taken.summary;
    if (taken.summary.has_value() && !SendsFinalMessage(*taken.summary)) {
      done_ = true;
      Finish(link_.scope().Sent(ToGrpc(taken.summary->status)));
      return;
    }
    response_.Clear();
    FillChunk(request_id_, taken.chunk, &response_);
    if (taken.summary.has_value()) {
      FillSummary(*taken.summary, &response_);
      const grpc::Status status = ToGrpc(taken.summary->status);
      if (status.ok()) {
        // One write carries the last message and the trailers (gRPC sends
        // no message with a status that is not OK, hence the other way).
        done_ = true;
        StartWriteAndFinish(&response_, grpc::WriteOptions(), link_.scope().Sent(status));
        return;
      }
      final_status_ = status;
    }
    writing_ = true;
    StartWrite(&response_);
  }

  EngineLink link_;
  std::string request_id_;  // set once, before the engine can produce
  v1::GenerateResponse response_ ABSL_GUARDED_BY(link_.mu());
  bool writing_ ABSL_GUARDED_BY(link_.mu()) = false;
  bool done_ ABSL_GUARDED_BY(link_.mu()) = false;
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(link_.mu());
};

void FillModelInfo(const HostedModel& model, v1::ModelInfo* info) {
  info->set_name(model.name);
  info->set_kind(ToWire(model.kind));
  info->set_vocab_size(static_cast<int32_t>(model.vocab_size));
  info->set_max_sequence_length(static_cast<int32_t>(model.max_sequence_length));
  info->set_tokenizer(model.tokenizer ? model.tokenizer->name() : "");
  if (model.engine) {
    const EngineStats stats = model.engine->Stats();
    info->set_state_bytes_per_sequence(model.engine->info().state_bytes_per_sequence);
    info->set_weight_dtype(model.engine->info().weight_dtype);
    info->set_weight_bytes(model.engine->info().weight_bytes);
    info->set_max_sequences(static_cast<int32_t>(stats.capacity));
    info->set_active_sequences(static_cast<int32_t>(stats.active));
    info->set_queued_requests(static_cast<int32_t>(stats.queued));
    info->set_ready(!model.engine->draining());
  } else {
    info->set_ready(true);
  }
}

// Who a session RPC comes from and which generating model it names, both
// noted in the RPC's record. Checked in this order: UNAUTHENTICATED;
// UNAVAILABLE (DrainingError) for a new session (`creates`) while the
// server drains, which lets sessions be exported and deleted; a bad
// session_id; NOT_FOUND / FAILED_PRECONDITION for the model as for
// generation.
struct SessionTarget {
  Caller caller;
  HostedModel* model = nullptr;
};
absl::StatusOr<SessionTarget> ResolveSessionTarget(const grpc::CallbackServerContext& context,
                                                   const TokenAuthenticator* tokens,
                                                   ModelRepository& repository, RpcScope& scope,
                                                   const std::string& model,
                                                   const std::string& session_id,
                                                   bool creates = false) {
  absl::StatusOr<Caller> caller = CallerOf(context, tokens);
  if (!caller.ok()) return caller.status();
  scope.record().caller = caller->name;
  if (creates && repository.draining()) return DrainingError();
  if (absl::Status s = ValidateSessionId(session_id); !s.ok()) return s;
  absl::StatusOr<HostedModel*> hosted = GeneratingModel(repository, model, kPerformerModelListing);
  if (!hosted.ok()) return hosted.status();
  scope.record().model = (*hosted)->name;
  return SessionTarget{*std::move(caller), *hosted};
}

// A session's bytes as ExportSession and TakeSession answer them.
void FillSessionState(const HostedModel& model, const std::string& session_id,
                      ExportedSession exported, v1::SessionState* response) {
  response->set_model(model.name);
  response->set_session_id(session_id);
  response->set_position(exported.position);
  response->set_tokens(exported.tokens);
  response->set_data(std::move(exported.data));
}

}  // namespace

GenerationService::GenerationService(ModelRepository& repository, ServiceOptions options)
    : repository_(repository), options_(options) {}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  auto* writer = new StreamWriter(context, options_.observers);
  const GenerationStart start = StartSettings(options_, /*streamed=*/true);
  const grpc::Status status =
      StartGeneration(repository_, start, context, *request, writer->record(),
                      [writer](const std::string& id, std::shared_ptr<RequestStream> stream) {
                        writer->Attach(id, std::move(stream));
                      });
  if (!status.ok()) writer->FinishNow(status);
  return writer;
}

grpc::ServerUnaryReactor* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                      const v1::GenerateRequest* request,
                                                      v1::GenerateResponse* response) {
  auto* generator =
      new UnaryGenerator(context, options_.observers, "Generate", kPerformerProtocol, response);
  const GenerationStart start = StartSettings(options_, /*streamed=*/false);
  const grpc::Status status = generator->Start(repository_, start, context, *request);
  if (!status.ok()) generator->FinishNow(status);
  return generator;
}

grpc::ServerUnaryReactor* GenerationService::Cancel(grpc::CallbackServerContext* context,
                                                    const v1::CancelRequest* request,
                                                    v1::CancelResponse* response) {
  RpcScope scope(options_.observers, "Cancel", kPerformerProtocol, context);
  scope.record().request_id = request->request_id();
  const absl::StatusOr<Caller> caller = CallerOf(*context, options_.tokens);
  if (!caller.ok()) return AnswerNow(context, scope, ToGrpc(caller.status()));
  scope.record().caller = caller->name;
  if (request->request_id().empty()) {
    return AnswerNow(context, scope,
                     grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                  "request_id: empty; name the request to cancel"));
  }
  if (absl::Status s = ValidateRequestId(request->request_id(),
                                         repository_.request_bounds().max_request_id_bytes);
      !s.ok()) {
    return AnswerNow(context, scope, ToGrpc(s));
  }
  // Ids are per caller: without "cancel_any" a caller reaches only its own
  // requests, and another caller's id is simply not found.
  const bool any_owner = caller->Has(Permission::kCancelAny);
  bool cancelled = false;
  for (const auto& model : repository_.models()) {
    if (model->engine == nullptr) continue;
    if (any_owner ? model->engine->CancelAnyOwner(request->request_id())
                  : model->engine->Cancel(request->request_id(), caller->name)) {
      cancelled = true;
    }
  }
  response->set_cancelled(cancelled);
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* context,
                                                        const v1::ListModelsRequest* /*request*/,
                                                        v1::ListModelsResponse* response) {
  RpcScope scope(options_.observers, "ListModels", kPerformerProtocol, context);
  for (const auto& model : repository_.models()) FillModelInfo(*model, response->add_models());
  response->set_default_model(repository_.default_model());
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::GetModel(grpc::CallbackServerContext* context,
                                                      const v1::GetModelRequest* request,
                                                      v1::ModelInfo* response) {
  RpcScope scope(options_.observers, "GetModel", kPerformerProtocol, context);
  HostedModel* model = repository_.Find(request->name());
  if (model == nullptr) {
    return AnswerNow(context, scope,
                     ToGrpc(UnknownModelError("name", request->name(), kPerformerModelListing)));
  }
  scope.record().model = model->name;
  FillModelInfo(*model, response);
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::Embed(grpc::CallbackServerContext* context,
                                                   const v1::EmbedRequest* request,
                                                   v1::EmbedResponse* response) {
  // The forward runs on the model's embedder thread, not on this one: the
  // call's record lives until the answer, which may come from there.
  struct EmbedCall {
    EmbedCall(const std::vector<RpcObserver*>& observers, grpc::CallbackServerContext* context)
        : scope(observers, "Embed", kPerformerProtocol, context),
          reactor(context->DefaultReactor()) {}
    RpcScope scope;
    grpc::ServerUnaryReactor* reactor;
    // Reports the RPC, finishes it and frees the call. The report comes
    // first: once finished, gRPC may free the context at any moment (the
    // answer can come from the embedder's thread).
    grpc::ServerUnaryReactor* Answer(const grpc::Status& status) {
      grpc::ServerUnaryReactor* r = reactor;
      scope.End(scope.Sent(status));
      delete this;
      r->Finish(status);
      return r;
    }
  };
  auto* call = new EmbedCall(options_.observers, context);
  if (repository_.draining()) return call->Answer(ToGrpc(DrainingError()));
  HostedModel* model = repository_.Find(request->model());
  if (model == nullptr) {
    return call->Answer(
        ToGrpc(UnknownModelError("model", request->model(), kPerformerModelListing)));
  }
  call->scope.record().model = model->name;
  if (model->embedder == nullptr) {
    return call->Answer(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                     absl::StrCat("model ", model->name,
                                                  " is a causal decoder: Embed needs a "
                                                  "bidirectional model or an encoder-decoder "
                                                  "(its encoder)")));
  }
  const v1::Pooling pooling = request->pooling();
  if (pooling != v1::POOLING_UNSPECIFIED && pooling != v1::POOLING_MEAN &&
      pooling != v1::POOLING_NONE) {
    return call->Answer(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                     absl::StrCat("pooling: unknown value ", pooling)));
  }
  absl::StatusOr<std::vector<int64_t>> tokens =
      Tokens(*model, repository_.request_bounds(), request->input_case() == v1::EmbedRequest::kText,
             request->text(), request->tokens().ids(), "text");
  if (!tokens.ok()) return call->Answer(ToGrpc(tokens.status()));
  grpc::ServerUnaryReactor* reactor = call->reactor;
  model->embedder->EmbedAsync(std::move(*tokens), pooling != v1::POOLING_NONE,
                              [call, response](absl::StatusOr<Embedding> embedding) {
                                if (embedding.ok()) {
                                  response->set_dim(static_cast<int32_t>(embedding->dim));
                                  response->set_tokens(static_cast<int32_t>(embedding->tokens));
                                  response->mutable_values()->Add(embedding->values.begin(),
                                                                  embedding->values.end());
                                }
                                call->Answer(ToGrpc(embedding.status()));
                              });
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::DeleteSession(
    grpc::CallbackServerContext* context, const v1::DeleteSessionRequest* request,
    v1::DeleteSessionResponse* /*response*/) {
  RpcScope scope(options_.observers, "DeleteSession", kPerformerProtocol, context);
  absl::StatusOr<SessionTarget> target = ResolveSessionTarget(
      *context, options_.tokens, repository_, scope, request->model(), request->session_id());
  if (!target.ok()) return AnswerNow(context, scope, ToGrpc(target.status()));
  return AnswerNow(
      context, scope,
      ToGrpc(target->model->engine->DeleteSession(request->session_id(), target->caller.name)));
}

grpc::ServerUnaryReactor* GenerationService::ExportSession(grpc::CallbackServerContext* context,
                                                           const v1::ExportSessionRequest* request,
                                                           v1::SessionState* response) {
  RpcScope scope(options_.observers, "ExportSession", kPerformerProtocol, context);
  absl::StatusOr<SessionTarget> target = ResolveSessionTarget(
      *context, options_.tokens, repository_, scope, request->model(), request->session_id());
  if (!target.ok()) return AnswerNow(context, scope, ToGrpc(target.status()));
  absl::StatusOr<ExportedSession> exported =
      target->model->engine->ExportSession(request->session_id(), target->caller.name);
  if (!exported.ok()) return AnswerNow(context, scope, ToGrpc(exported.status()));
  FillSessionState(*target->model, request->session_id(), *std::move(exported), response);
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::ImportSession(grpc::CallbackServerContext* context,
                                                           const v1::ImportSessionRequest* request,
                                                           v1::ImportSessionResponse* response) {
  RpcScope scope(options_.observers, "ImportSession", kPerformerProtocol, context);
  absl::StatusOr<SessionTarget> target =
      ResolveSessionTarget(*context, options_.tokens, repository_, scope, request->model(),
                           request->session_id(), /*creates=*/true);
  if (!target.ok()) return AnswerNow(context, scope, ToGrpc(target.status()));
  absl::StatusOr<int64_t> position = target->model->engine->ImportSession(
      request->session_id(), request->data(), target->caller.name);
  if (!position.ok()) return AnswerNow(context, scope, ToGrpc(position.status()));
  response->set_position(*position);
  return AnswerNow(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::TakeSession(grpc::CallbackServerContext* context,
                                                         const v1::TakeSessionRequest* request,
                                                         v1::SessionState* response) {
  RpcScope scope(options_.observers, "TakeSession", kPerformerProtocol, context);
  absl::StatusOr<SessionTarget> target = ResolveSessionTarget(
      *context, options_.tokens, repository_, scope, request->model(), request->session_id());
  if (!target.ok()) return AnswerNow(context, scope, ToGrpc(target.status()));
  // Another caller's session only for a peer replica's token.
  std::string owner = target->caller.name;
  if (options_.tokens != nullptr && request->owner() != owner) {
    if (!target->caller.Has(Permission::kPeer)) {
      return AnswerNow(context, scope,
                       grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                    "owner: another caller's session moves only to a peer "
                                    "replica, whose token has the \"peer\" permission"));
    }
    owner = request->owner();
  }
  Engine& engine = *target->model->engine;
  if (request->fingerprint() != FingerprintText(engine.fingerprint())) {
    return AnswerNow(
        context, scope,
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                     absl::StrCat("fingerprint: model ", target->model->name,
                                  " here has other weights or configuration; the session stays")));
  }
  absl::StatusOr<ExportedSession> taken = engine.TakeSession(request->session_id(), owner);
  if (!taken.ok()) return AnswerNow(context, scope, ToGrpc(taken.status()));
  FillSessionState(*target->model, request->session_id(), *std::move(taken), response);
  return AnswerNow(context, scope, grpc::Status::OK);
}

}  // namespace performer::server
