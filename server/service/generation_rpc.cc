#include "server/service/generation_rpc.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "server/engine/draining.h"
#include "server/logging/user_text.h"
#include "server/security/call_gate.h"
#include "server/service/write_threads.h"

namespace performer::server {
namespace {

std::string NewRequestId() {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::StrFormat("req-%016x", absl::Uniform<uint64_t>(*gen));
}

// The wire request as the engine's request: tokenized, with the model's
// defaults merged in. The engine validates it (Engine::Submit) against the
// same `bounds` (the repository's, which its engines were given).
absl::StatusOr<GenerationRequest> ToEngineRequest(const v1::GenerateRequest& wire,
                                                  const HostedModel& model,
                                                  const RequestBounds& bounds,
                                                  const grpc::CallbackServerContext& context) {
  GenerationRequest r;
  r.request_id = wire.request_id().empty() ? NewRequestId() : wire.request_id();
  absl::StatusOr<std::vector<int64_t>> prompt =
      Tokens(model, bounds, wire.prompt_case() == v1::GenerateRequest::kPromptText,
             wire.prompt_text(), wire.prompt_tokens().ids(), "prompt_text");
  if (!prompt.ok()) return prompt.status();
  r.prompt = std::move(*prompt);
  absl::StatusOr<std::vector<int64_t>> source =
      Tokens(model, bounds, wire.source_case() == v1::GenerateRequest::kSourceText,
             wire.source_text(), wire.source_tokens().ids(), "source_text");
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
  r.sampling = generation::ResolveSamplingParams(defaults.SamplingDefaults(), overrides,
                                                 std::min(bounds.max_new_tokens, room));
  r.return_logprobs = wire.return_logprobs();
  r.priority = wire.priority();
  r.session_id = wire.session_id();
  r.create_session = wire.create_session();
  const auto deadline = context.deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    r.deadline = absl::FromChrono(deadline);
  }
  return r;
}

// The x-session-id request metadata (a proxy's routing key) must name the
// request's session where both are given.
absl::Status CheckSessionMetadata(const grpc::CallbackServerContext& context,
                                  const v1::GenerateRequest& wire) {
  const auto& metadata = context.client_metadata();
  const auto header = metadata.find("x-session-id");
  if (header == metadata.end() || wire.session_id().empty()) return absl::OkStatus();
  const std::string routed(header->second.data(), header->second.size());
  if (routed == wire.session_id()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "x-session-id metadata \"", BoundUserText(routed), "\" is not the request's session_id \"",
      BoundUserText(wire.session_id()), "\": a proxy routes the turn by the metadata"));
}

// A turn of a session this replica does not hold: the peers are asked to
// move it here first. NOT_FOUND from them is not an error here: the engine
// then looks in the spill folder and answers the miss itself; `note` keeps
// the peers that could not be asked, for that answer.
absl::Status BringSession(const GenerationStart& options, HostedModel& model,
                          const GenerationRequest& r, std::string* note) {
  if (r.session_id.empty() || r.create_session || options.peers == nullptr ||
      !options.peers->enabled() || !ValidateSessionId(r.session_id).ok() ||
      model.engine->HoldsSession(r.session_id, r.owner)) {
    return absl::OkStatus();
  }
  absl::Status fetched = options.peers->Fetch(*model.engine, r.session_id, r.owner);
  if (absl::IsNotFound(fetched)) {
    *note = std::string(fetched.message());
    return absl::OkStatus();
  }
  if (absl::IsUnavailable(fetched)) model.engine->CountSessionPeerUnavailable();
  return fetched;
}

// The client's own timer fires a little before the server's copy of the
// same deadline (it was sent as a relative timeout and started on arrival),
// so a cancel that comes within kDeadlineSlack of the deadline is the
// deadline.
constexpr std::chrono::milliseconds kDeadlineSlack{100};

}  // namespace

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::vector<int64_t>> Tokens(const HostedModel& model, const RequestBounds& bounds,
                                            bool has_text, const std::string& text,
                                            const google::protobuf::RepeatedField<int32_t>& ids,
                                            const char* field) {
  if (has_text) {
    if (absl::Status s = ValidatePromptText(text, field, bounds); !s.ok()) return s;
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

absl::Status UnknownModelError(const char* field, const std::string& name) {
  return absl::NotFoundError(absl::StrCat(field, ": no model named \"", BoundUserText(name),
                                          "\" is hosted here (see ListModels)"));
}

absl::StatusOr<HostedModel*> GeneratingModel(ModelRepository& repository, const std::string& name) {
  HostedModel* model = repository.Find(name);
  if (model == nullptr) {
    return UnknownModelError("model", name);
  }
  if (model->engine == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", model->name, " is a bidirectional encoder: it supports Embed, not generation"));
  }
  return model;
}

FinishReason CancelReason(const grpc::CallbackServerContext* context) {
  const auto deadline = context->deadline();
  return deadline != std::chrono::system_clock::time_point::max() &&
                 deadline <= std::chrono::system_clock::now() + kDeadlineSlack
             ? FinishReason::kDeadline
             : FinishReason::kCancelled;
}

grpc::Status CancelledStatus(const grpc::CallbackServerContext* context) {
  return CancelReason(context) == FinishReason::kDeadline
             ? grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the deadline passed")
             : grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the call");
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

void FillChunk(const std::string& request_id, const StreamChunk& chunk,
               v1::GenerateResponse* response) {
  response->set_request_id(request_id);
  response->mutable_token_ids()->Add(chunk.token_ids.begin(), chunk.token_ids.end());
  response->mutable_text()->append(chunk.text);
  response->mutable_logprobs()->Add(chunk.logprobs.begin(), chunk.logprobs.end());
  if (chunk.session_position > 0) response->set_session_position(chunk.session_position);
}

void FillSummary(const StreamSummary& summary, v1::GenerateResponse* response) {
  response->set_finish_reason(ToWire(summary.reason));
  response->mutable_usage()->set_prompt_tokens(static_cast<int32_t>(summary.prompt_tokens));
  response->mutable_usage()->set_generated_tokens(static_cast<int32_t>(summary.generated_tokens));
  response->mutable_usage()->set_cached_prompt_tokens(
      static_cast<int32_t>(summary.cached_prompt_tokens));
  response->mutable_timings()->set_queue_seconds(summary.queue_seconds);
  response->mutable_timings()->set_time_to_first_token_seconds(summary.time_to_first_token_seconds);
  response->mutable_timings()->set_total_seconds(summary.total_seconds);
  if (summary.session_position > 0) response->set_session_position(summary.session_position);
}

bool SendsFinalMessage(const StreamSummary& summary) {
  return summary.status.ok() || summary.reason == FinishReason::kCancelled ||
         summary.reason == FinishReason::kDeadline;
}

RpcScope::RpcScope(const std::vector<RpcObserver*>& observers, std::string_view method,
                   std::string_view protocol, const grpc::CallbackServerContext* context)
    : observers_(observers), context_(context), start_(absl::Now()) {
  record_.method = method;
  record_.protocol = protocol;
  record_.peer = context->peer();
  for (RpcObserver* o : observers_) o->OnRpcStart(method);
}

void RpcScope::End(const grpc::Status& status) {
  if (ended_) return;
  ended_ = true;
  // A cancelled call's client saw CANCELLED or DEADLINE_EXCEEDED, not what
  // the server may still have sent.
  record_.status = FromGrpc(context_->IsCancelled() ? CancelledStatus(context_) : status);
  record_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  for (RpcObserver* o : observers_) o->OnRpcEnd(record_);
}

grpc::ServerUnaryReactor* AnswerNow(grpc::CallbackServerContext* context, RpcScope& scope,
                                    const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(scope.Sent(status));
  return reactor;
}

std::function<void()> ReactorGuard::Listener(std::function<void()> on_data) const {
  auto pump = std::make_shared<std::function<void()>>(std::move(on_data));
  return [guard = guard_, pump] {
    // One pending pump per reactor: appends while it waits are taken by it.
    if (guard->pump_posted.exchange(true)) return;
    WriteThreads::Get().Post([guard, pump] {
      // Cleared first: an append from here on posts again, so none is missed.
      guard->pump_posted.store(false);
      ReactorLock lock(guard->mu);
      if (guard->alive) (*pump)();
    });
  };
}

void ReactorGuard::Retire() {
  ReactorLock lock(guard_->mu);
  guard_->alive = false;
}

void EngineLink::Attach(std::shared_ptr<RequestStream> stream, std::function<void()> on_data) {
  stream_ = std::move(stream);
  stream_->SetListener(guard_.Listener(std::move(on_data)));
}

grpc::Status StartGeneration(ModelRepository& repository, const GenerationStart& options,
                             grpc::CallbackServerContext* context, const v1::GenerateRequest& wire,
                             RpcRecord& record, const AttachGeneration& attach) {
  record.request_id = wire.request_id();
  if (repository.draining()) return ToGrpc(DrainingError());
  const absl::StatusOr<Caller> caller = CallerOf(*context, options.tokens);
  if (!caller.ok()) return ToGrpc(caller.status());
  record.caller = caller->name;
  if (wire.priority() > options.max_priority_unprivileged && !caller->Has(Permission::kPriority)) {
    if (options.security_observer != nullptr) {
      options.security_observer->OnPermissionDenied(caller->name, Permission::kPriority);
    }
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat("priority: ", wire.priority(), " is above ", options.max_priority_unprivileged,
                     ", the highest a caller without the \"priority\" permission may ask for"));
  }
  if (absl::Status s = CheckSessionMetadata(*context, wire); !s.ok()) return ToGrpc(s);
  absl::StatusOr<HostedModel*> model = GeneratingModel(repository, wire.model());
  if (!model.ok()) return ToGrpc(model.status());
  record.model = (*model)->name;
  absl::StatusOr<GenerationRequest> request =
      ToEngineRequest(wire, **model, repository.request_bounds(), *context);
  if (!request.ok()) return ToGrpc(request.status());
  request->max_buffered_tokens = options.buffer_tokens;
  request->owner = caller->name;
  record.request_id = request->request_id;
  std::string peers_note;
  if (absl::Status s = BringSession(options, **model, *request, &peers_note); !s.ok()) {
    return ToGrpc(s);
  }
  auto stream = std::make_shared<RequestStream>(options.buffer_tokens);
  // The listener is attached before the engine can produce anything.
  attach(request->request_id, stream);
  absl::Status submitted = (*model)->engine->Submit(std::move(*request), stream);
  if (absl::IsResourceExhausted(submitted)) {
    const int64_t ms = absl::ToInt64Milliseconds((*model)->engine->RetryHint());
    if (options.retry_pushback_metadata) {
      context->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(ms));
    }
    submitted = absl::ResourceExhaustedError(
        absl::StrCat(submitted.message(), " (suggested retry after ", ms, " ms)"));
  }
  if (absl::IsNotFound(submitted) && !peers_note.empty()) {
    submitted = absl::NotFoundError(absl::StrCat(submitted.message(), " (", peers_note, ")"));
  }
  return ToGrpc(submitted);
}

UnaryGenerator::UnaryGenerator(grpc::CallbackServerContext* context,
                               const std::vector<RpcObserver*>& observers, std::string_view method,
                               std::string_view protocol, v1::GenerateResponse* response)
    : link_(context, observers, method, protocol),
      response_(response != nullptr ? response : &own_) {}

void UnaryGenerator::FinishNow(const grpc::Status& status) {
  ReactorLock lock(link_.mu());
  done_ = true;
  Finish(link_.scope().Sent(status));
}

void UnaryGenerator::Attach(const std::string& request_id, std::shared_ptr<RequestStream> stream) {
  request_id_ = request_id;
  link_.Attach(std::move(stream), [this] {
    link_.mu().AssertHeld();
    Collect();
  });
}

grpc::Status UnaryGenerator::Start(ModelRepository& repository, const GenerationStart& options,
                                   grpc::CallbackServerContext* context,
                                   const v1::GenerateRequest& wire) {
  return StartGeneration(
      repository, options, context, wire, record(),
      [this](const std::string& request_id, std::shared_ptr<RequestStream> stream) {
        Attach(request_id, std::move(stream));
      });
}

void UnaryGenerator::OnCancel() {
  ReactorLock lock(link_.mu());
  link_.CancelFromRpc();
}

void UnaryGenerator::OnDone() {
  link_.Retire();
  delete this;
}

void UnaryGenerator::Collect() {
  if (done_) return;
  RequestStream::Taken taken = link_.stream().Take();
  FillChunk(request_id_, taken.chunk, response_);
  if (!taken.summary.has_value()) return;
  FillSummary(*taken.summary, response_);
  record().summary = *taken.summary;
  done_ = true;
  Finish(link_.scope().Sent(Complete(ToGrpc(taken.summary->status))));
}

}  // namespace performer::server
