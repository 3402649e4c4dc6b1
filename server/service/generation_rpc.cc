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
  CallFacts call;
  if (!repository.draining()) call.caller = CallerOf(*context, options.tokens);
  const auto& metadata = context->client_metadata();
  if (const auto header = metadata.find("x-session-id"); header != metadata.end()) {
    call.routed_session_id = std::string(header->second.data(), header->second.size());
  }
  if (const auto deadline = context->deadline();
      deadline != std::chrono::system_clock::time_point::max()) {
    call.deadline = absl::FromChrono(deadline);
  }
  int64_t retry_after_ms = -1;
  const absl::Status status =
      StartGeneration(repository, options, call, wire, record, attach, &retry_after_ms);
  if (retry_after_ms >= 0 && options.retry_pushback_metadata) {
    context->AddTrailingMetadata("grpc-retry-pushback-ms", std::to_string(retry_after_ms));
  }
  return ToGrpc(status);
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
