#include "server/service/generation_service.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/decoding/sequence_decoder.h"
#include "server/repository/embedder.h"
#include "server/security/call_gate.h"

namespace performer::server {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

v1::FinishReason ToWire(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEos:
      return v1::FINISH_REASON_EOS;
    case FinishReason::kStopToken:
      return v1::FINISH_REASON_STOP_TOKEN;
    case FinishReason::kStopString:
      return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline:
      return v1::FINISH_REASON_DEADLINE;
    case FinishReason::kNone:
    case FinishReason::kError:
      break;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

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

std::string NewRequestId() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::StrFormat("req-%016x", absl::Uniform<uint64_t>(*gen));
}

// Text or token ids of a oneof, as model tokens. `field` names the text
// field in messages.
absl::StatusOr<std::vector<int64_t>> Tokens(const HostedModel& model, bool has_text,
                                            const std::string& text,
                                            const google::protobuf::RepeatedField<int32_t>& ids,
                                            const char* field) {
  if (has_text) {
    if (model.tokenizer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": model ", model.name,
          " has no tokenizer; send token ids instead (its ModelInfo.tokenizer is empty)"));
    }
    absl::StatusOr<std::vector<int32_t>> encoded = model.tokenizer->Encode(text);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", encoded.status().message()));
    }
    return std::vector<int64_t>(encoded->begin(), encoded->end());
  }
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// The wire request as the engine's request: tokenized, with the model's
// defaults merged in. The engine validates it (Engine::Submit).
absl::StatusOr<GenerationRequest> ToEngineRequest(const v1::GenerateRequest& wire,
                                                  const HostedModel& model,
                                                  const grpc::CallbackServerContext& context) {
  GenerationRequest r;
  r.request_id = wire.request_id().empty() ? NewRequestId() : wire.request_id();
  absl::StatusOr<std::vector<int64_t>> prompt =
      Tokens(model, wire.prompt_case() == v1::GenerateRequest::kPromptText, wire.prompt_text(),
             wire.prompt_tokens().ids(), "prompt_text");
  if (!prompt.ok()) return prompt.status();
  r.prompt = std::move(*prompt);
  absl::StatusOr<std::vector<int64_t>> source =
      Tokens(model, wire.source_case() == v1::GenerateRequest::kSourceText, wire.source_text(),
             wire.source_tokens().ids(), "source_text");
  if (!source.ok()) return source.status();
  r.source = std::move(*source);
  const GenerationConfig& defaults = model.generation;
  if (model.kind == ModelKind::kEncoderDecoder && r.prompt.empty()) {
    if (defaults.decoder_start_token_id.has_value()) {
      r.prompt = {*defaults.decoder_start_token_id};
    } else if (defaults.bos_token_id.has_value()) {
      r.prompt = {*defaults.bos_token_id};
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt_tokens: empty, and model ", model.name,
          " has no decoder_start_token_id in generation_config.json to start the decoder with"));
    }
  }

  generation::SamplingOverrides overrides;
  if (wire.max_new_tokens() != 0) overrides.max_new_tokens = wire.max_new_tokens();
  if (wire.has_temperature()) overrides.temperature = wire.temperature();
  if (wire.top_k() != 0) overrides.top_k = wire.top_k();
  if (wire.has_top_p()) overrides.top_p = wire.top_p();
  if (wire.has_repetition_penalty()) overrides.repetition_penalty = wire.repetition_penalty();
  if (wire.has_seed()) overrides.seed = wire.seed();
  overrides.stop_token_ids.assign(wire.stop_token_ids().begin(), wire.stop_token_ids().end());
  overrides.stop_strings.assign(wire.stop_strings().begin(), wire.stop_strings().end());
  overrides.ignore_eos = wire.ignore_eos();
  // A default max_new_tokens is trimmed to what fits after the prompt and
  // under the server's limit; an explicit one that does not fit is refused
  // by the engine's validation.
  const int64_t room = model.max_sequence_length - static_cast<int64_t>(r.prompt.size());
  r.sampling =
      generation::ResolveSamplingParams(defaults.SamplingDefaults(), overrides,
                                        std::min(model.engine->limits().max_new_tokens, room));
  r.return_logprobs = wire.return_logprobs();
  r.priority = wire.priority();
  const auto deadline = context.deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    r.deadline = absl::FromChrono(deadline);
  }
  return r;
}

// Looks up the model of a generation request.
absl::StatusOr<HostedModel*> GeneratingModel(ModelRepository& repository, const std::string& name) {
  HostedModel* model = repository.Find(name);
  if (model == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("model: no model named \"", name, "\" is hosted here (see ListModels)"));
  }
  if (model->engine == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", model->name, " is a bidirectional encoder: it supports Embed, not generation"));
  }
  return model;
}

void FillChunk(const std::string& request_id, const StreamChunk& chunk,
               v1::GenerateResponse* response) {
  response->set_request_id(request_id);
  response->mutable_token_ids()->Add(chunk.token_ids.begin(), chunk.token_ids.end());
  response->mutable_text()->append(chunk.text);
  response->mutable_logprobs()->Add(chunk.logprobs.begin(), chunk.logprobs.end());
}

void FillSummary(const StreamSummary& summary, v1::GenerateResponse* response) {
  response->set_finish_reason(ToWire(summary.reason));
  response->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(summary.prompt_tokens));
  response->mutable_usage()->set_generated_tokens(static_cast<int32_t>(summary.generated_tokens));
  response->mutable_timings()->set_queue_seconds(summary.queue_seconds);
  response->mutable_timings()->set_time_to_first_token_seconds(summary.time_to_first_token_seconds);
  response->mutable_timings()->set_total_seconds(summary.total_seconds);
}

// The reason a cancelled RPC gives the engine. The client's own timer
// fires a little before the server's copy of the same deadline (it was sent
// as a relative timeout and started on arrival), so a cancel that comes
// within kDeadlineSlack of the deadline is the deadline.
constexpr std::chrono::milliseconds kDeadlineSlack{100};

FinishReason CancelReason(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  return deadline != std::chrono::system_clock::time_point::max() &&
                 deadline <= std::chrono::system_clock::now() + kDeadlineSlack
             ? FinishReason::kDeadline
             : FinishReason::kCancelled;
}

// What the client of a cancelled RPC sees, whatever the server sends.
grpc::Status CancelledStatus(const grpc::CallbackServerContext* context) {
  return CancelReason(context) == FinishReason::kDeadline
             ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed")
             : grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// One RPC's record for the observers (metrics, request log): started on
// construction, reported exactly once by End().
class RpcScope {
 public:
  RpcScope(const ServiceOptions& options, std::string_view method,
           const grpc::CallbackServerContext* context)
      : observers_(options.observers),
        context_(context),
        start_(absl::Now()),
        caller_(CallerOf(*context, options.tokens)) {
    record_.method = method;
    record_.peer = context->peer();
    if (caller_.ok()) record_.caller = caller_->name;
    for (RpcObserver* o : observers_) o->OnRpcStart(method);
  }
  RpcScope(const RpcScope&) = delete;
  RpcScope& operator=(const RpcScope&) = delete;
  ~RpcScope() { End(sent_); }

  RpcRecord& record() { return record_; }
  // Who made the call; UNAUTHENTICATED when its token was revoked after the
  // call gate let it in.
  const absl::StatusOr<Caller>& caller() const { return caller_; }
  // Notes the status the RPC is finished with and returns it.
  const grpc::Status& Sent(const grpc::Status& status) {
    sent_ = status;
    return sent_;
  }
  void End(const grpc::Status& status) {
    if (ended_) return;
    ended_ = true;
    // A cancelled call's client saw CANCELLED or DEADLINE_EXCEEDED, not
    // what the server may still have sent.
    record_.status = FromGrpc(context_->IsCancelled() ? CancelledStatus(context_) : status);
    record_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    for (RpcObserver* o : observers_) o->OnRpcEnd(record_);
  }

 private:
  const std::vector<RpcObserver*>& observers_;
  const grpc::CallbackServerContext* context_;
  const absl::Time start_;
  const absl::StatusOr<Caller> caller_;
  RpcRecord record_;
  grpc::Status sent_;
  bool ended_ = false;
};

// A finished request that ended with cancel or deadline still sends its
// last message (finish_reason) before the status; other errors drop it.
bool SendsFinalMessage(const StreamSummary& summary) {
  return summary.status.ok() || summary.reason == FinishReason::kCancelled ||
         summary.reason == FinishReason::kDeadline;
}

// What both generation reactors share: the engine thread notifies a
// reactor through its RequestStream's listener while gRPC calls its
// reactions. One recursive mutex orders the two (a reaction may run inline
// inside StartWrite), and `alive` keeps a late listener call away from a
// deleted reactor.
class EngineLink {
 public:
  EngineLink(grpc::CallbackServerContext* context, const ServiceOptions& options,
             std::string_view method)
      : context_(context), guard_(std::make_shared<Guard>()), scope_(options, method, context) {}

  std::recursive_mutex& mu() { return guard_->mu; }
  RequestStream& stream() { return *stream_; }
  RpcScope& scope() { return scope_; }
  const RpcScope& scope() const { return scope_; }
  const grpc::CallbackServerContext* context() const { return context_; }

  // `on_data` runs under mu(), only while the reactor lives.
  void Attach(std::shared_ptr<RequestStream> stream, std::function<void()> on_data) {
    stream_ = std::move(stream);
    stream_->SetListener([guard = guard_, on_data = std::move(on_data)] {
      std::lock_guard<std::recursive_mutex> lock(guard->mu);
      if (guard->alive) on_data();
    });
  }
  // The RPC was cancelled (or its client went away): the engine ends the
  // request within a step. Call with mu() held.
  void CancelFromRpc() {
    if (stream_) stream_->RequestCancel(CancelReason(context_));
  }
  // From OnDone, before the reactor is deleted.
  void Retire() {
    std::lock_guard<std::recursive_mutex> lock(guard_->mu);
    guard_->alive = false;
  }

 private:
  struct Guard {
    std::recursive_mutex mu;
    bool alive = true;
  };

  grpc::CallbackServerContext* context_;
  std::shared_ptr<Guard> guard_;
  std::shared_ptr<RequestStream> stream_;
  // Ends (reports) when the reactor is deleted, after OnDone.
  RpcScope scope_;
};

// Streams one request's tokens as the engine produces them.
class StreamWriter : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  StreamWriter(grpc::CallbackServerContext* context, const ServiceOptions& options)
      : link_(context, options, "GenerateStream") {}

  RpcRecord& record() { return link_.scope().record(); }
  const absl::StatusOr<Caller>& caller() const { return link_.scope().caller(); }

  void FinishNow(const grpc::Status& status) {
    std::lock_guard<std::recursive_mutex> lock(link_.mu());
    done_ = true;
    Finish(link_.scope().Sent(status));
  }

  // `request_id` is echoed in every message.
  void Attach(std::string request_id, std::shared_ptr<RequestStream> stream) {
    request_id_ = std::move(request_id);
    link_.Attach(std::move(stream), [this] { Pump(); });
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::recursive_mutex> lock(link_.mu());
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
    std::lock_guard<std::recursive_mutex> lock(link_.mu());
    link_.CancelFromRpc();
  }

  void OnDone() override {
    link_.Retire();
    delete this;
  }

 private:
  // Called with the lock held: sends whatever the engine has produced.
  void Pump() {
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
      final_status_ = ToGrpc(taken.summary->status);
    }
    writing_ = true;
    StartWrite(&response_);
  }

  EngineLink link_;
  std::string request_id_;
  v1::GenerateResponse response_;
  bool writing_ = false;
  bool done_ = false;
  std::optional<grpc::Status> final_status_;
};

// Unary Generate: collects the whole generation, then answers once.
class UnaryGenerator : public grpc::ServerUnaryReactor {
 public:
  UnaryGenerator(grpc::CallbackServerContext* context, const ServiceOptions& options,
                 v1::GenerateResponse* response)
      : link_(context, options, "Generate"), response_(response) {}

  RpcRecord& record() { return link_.scope().record(); }
  const absl::StatusOr<Caller>& caller() const { return link_.scope().caller(); }

  void FinishNow(const grpc::Status& status) {
    std::lock_guard<std::recursive_mutex> lock(link_.mu());
    done_ = true;
    Finish(link_.scope().Sent(status));
  }

  void Attach(std::string request_id, std::shared_ptr<RequestStream> stream) {
    request_id_ = std::move(request_id);
    link_.Attach(std::move(stream), [this] { Collect(); });
  }

  void OnCancel() override {
    std::lock_guard<std::recursive_mutex> lock(link_.mu());
    link_.CancelFromRpc();
  }

  void OnDone() override {
    link_.Retire();
    delete this;
  }

 private:
  void Collect() {
    if (done_) return;
    RequestStream::Taken taken = link_.stream().Take();
    FillChunk(request_id_, taken.chunk, response_);
    if (!taken.summary.has_value()) return;
    FillSummary(*taken.summary, response_);
    record().summary = *taken.summary;
    done_ = true;
    Finish(link_.scope().Sent(ToGrpc(taken.summary->status)));
  }

  EngineLink link_;
  std::string request_id_;
  v1::GenerateResponse* response_;
  bool done_ = false;
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
    info->set_max_sequences(static_cast<int32_t>(stats.capacity));
    info->set_active_sequences(static_cast<int32_t>(stats.active));
    info->set_queued_requests(static_cast<int32_t>(stats.queued));
    info->set_ready(!model.engine->draining());
  } else {
    info->set_ready(true);
  }
}

// Finishes a unary RPC answered inline; `scope` reports it when it goes out
// of scope.
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, RpcScope& scope,
                                 const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(scope.Sent(status));
  return reactor;
}

}  // namespace

GenerationService::GenerationService(ModelRepository& repository, ServiceOptions options)
    : repository_(repository), options_(options) {}

// Resolves, converts and submits a generation whose output goes to
// `reactor`; on failure returns the status to finish the RPC with (and sets
// the retry hint for overload).
template <typename Reactor>
static grpc::Status Start(ModelRepository& repository, const ServiceOptions& options, bool draining,
                          grpc::CallbackServerContext* context, const v1::GenerateRequest& wire,
                          int64_t buffer_tokens, Reactor* reactor) {
  RpcRecord& record = reactor->record();
  record.request_id = wire.request_id();
  if (draining) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "the server is shutting down and accepts no new requests");
  }
  const absl::StatusOr<Caller>& caller = reactor->caller();
  if (!caller.ok()) return ToGrpc(caller.status());
  if (wire.priority() > options.max_priority_unprivileged && !caller->Has(Permission::kPriority)) {
    if (options.security_observer != nullptr) {
      options.security_observer->OnPermissionDenied(caller->name, Permission::kPriority);
    }
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("priority: ", wire.priority(), " is above ", options.max_priority_unprivileged,
                     ", the highest a caller without the \"priority\" permission may ask for"));
  }
  absl::StatusOr<HostedModel*> model = GeneratingModel(repository, wire.model());
  if (!model.ok()) return ToGrpc(model.status());
  record.model = (*model)->name;
  absl::StatusOr<GenerationRequest> request = ToEngineRequest(wire, **model, *context);
  if (!request.ok()) return ToGrpc(request.status());
  request->max_buffered_tokens = buffer_tokens;
  request->owner = caller->name;
  record.request_id = request->request_id;
  auto stream = std::make_shared<RequestStream>(buffer_tokens);
  // The listener is attached before the engine can produce anything.
  reactor->Attach(request->request_id, stream);
  absl::Status submitted = (*model)->engine->Submit(std::move(*request), stream);
  if (absl::IsResourceExhausted(submitted)) {
    const int64_t ms = absl::ToInt64Milliseconds((*model)->engine->RetryHint());
    context->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(ms));
    submitted = absl::ResourceExhaustedError(
        absl::StrCat(submitted.message(), " (suggested retry after ", ms, " ms)"));
  }
  return ToGrpc(submitted);
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::GenerateStream(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  auto* writer = new StreamWriter(context, options_);
  grpc::Status status = Start(repository_, options_, draining_.load(), context, *request,
                              options_.stream_buffer_tokens, writer);
  if (!status.ok()) writer->FinishNow(status);
  return writer;
}

grpc::ServerUnaryReactor* GenerationService::Generate(grpc::CallbackServerContext* context,
                                                      const v1::GenerateRequest* request,
                                                      v1::GenerateResponse* response) {
  auto* generator = new UnaryGenerator(context, options_, response);
  grpc::Status status = Start(repository_, options_, draining_.load(), context, *request,
                              /*buffer_tokens=*/0, generator);
  if (!status.ok()) generator->FinishNow(status);
  return generator;
}

grpc::ServerUnaryReactor* GenerationService::Cancel(grpc::CallbackServerContext* context,
                                                    const v1::CancelRequest* request,
                                                    v1::CancelResponse* response) {
  RpcScope scope(options_, "Cancel", context);
  scope.record().request_id = request->request_id();
  if (!scope.caller().ok()) return Answer(context, scope, ToGrpc(scope.caller().status()));
  if (request->request_id().empty()) {
    return Answer(context, scope,
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "request_id: empty; name the request to cancel"));
  }
  // Ids are per caller: without "cancel_any" a caller reaches only its own
  // requests, and another caller's id is simply not found.
  const Caller& caller = *scope.caller();
  const bool any_owner = caller.Has(Permission::kCancelAny);
  bool cancelled = false;
  for (const auto& model : repository_.models()) {
    if (model->engine == nullptr) continue;
    if (any_owner ? model->engine->CancelAnyOwner(request->request_id())
                  : model->engine->Cancel(request->request_id(), caller.name)) {
      cancelled = true;
    }
  }
  response->set_cancelled(cancelled);
  return Answer(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::ListModels(grpc::CallbackServerContext* context,
                                                        const v1::ListModelsRequest* /*request*/,
                                                        v1::ListModelsResponse* response) {
  RpcScope scope(options_, "ListModels", context);
  for (const auto& model : repository_.models()) FillModelInfo(*model, response->add_models());
  response->set_default_model(repository_.default_model());
  return Answer(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::GetModel(grpc::CallbackServerContext* context,
                                                      const v1::GetModelRequest* request,
                                                      v1::ModelInfo* response) {
  RpcScope scope(options_, "GetModel", context);
  HostedModel* model = repository_.Find(request->name());
  if (model == nullptr) {
    return Answer(context, scope,
                  grpc::Status(grpc::StatusCode::NOT_FOUND,
                               absl::StrCat("name: no model named \"", request->name(),
                                            "\" is hosted here (see ListModels)")));
  }
  scope.record().model = model->name;
  FillModelInfo(*model, response);
  return Answer(context, scope, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GenerationService::Embed(grpc::CallbackServerContext* context,
                                                   const v1::EmbedRequest* request,
                                                   v1::EmbedResponse* response) {
  // The forward runs on the model's embedder thread, not on this one: the
  // call's record lives until the answer, which may come from there.
  struct EmbedCall {
    EmbedCall(const ServiceOptions& options, grpc::CallbackServerContext* context)
        : scope(options, "Embed", context), reactor(context->DefaultReactor()) {}
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
  auto* call = new EmbedCall(options_, context);
  if (draining_.load()) {
    return call->Answer(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                     "the server is shutting down and accepts no new requests"));
  }
  HostedModel* model = repository_.Find(request->model());
  if (model == nullptr) {
    return call->Answer(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                     absl::StrCat("model: no model named \"", request->model(),
                                                  "\" is hosted here (see ListModels)")));
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
      Tokens(*model, request->input_case() == v1::EmbedRequest::kText, request->text(),
             request->tokens().ids(), "text");
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

}  // namespace performer::server
