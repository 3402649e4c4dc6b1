#include "server/http/http_generation.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/openai_response.h"
#include "server/security/call_gate.h"

namespace performer::server {
namespace {

// Retry-After (seconds, at least 1) for an overloaded or draining server.
HttpHeaders RetryHeaders(const absl::Status& status, int64_t retry_after_ms) {
  if (!absl::IsResourceExhausted(status) && !absl::IsUnavailable(status)) return {};
  const int64_t seconds = std::max<int64_t>(1, (retry_after_ms + 999) / 1000);
  return {{"Retry-After", absl::StrCat(seconds)}};
}

void Append(const StreamChunk& chunk, StreamChunk& all) {
  all.text += chunk.text;
  all.token_ids.insert(all.token_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
  all.logprobs.insert(all.logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
}

class HttpGeneration : public std::enable_shared_from_this<HttpGeneration> {
 public:
  HttpGeneration(std::shared_ptr<HttpExchange> exchange, bool stream,
                 std::unique_ptr<AnswerFormat> format, std::unique_ptr<CallReport> report)
      : exchange_(std::move(exchange)),
        stream_answer_(stream),
        format_(std::move(format)),
        report_(std::move(report)) {}

  RpcRecord& record() { return report_->record(); }

  // StartGeneration's attach: before the engine can produce.
  void Attach(std::shared_ptr<RequestStream> stream) {
    stream_ = std::move(stream);
    stream_->SetListener([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->Notify();
    });
  }

  // A refused request: answered at once.
  void Refuse(const absl::Status& status, int64_t retry_after_ms) {
    done_ = true;
    const absl::Status answered = format_->InTerms(status);
    RespondError(*exchange_, report_.get(), answered, retry_after_ms, format_->ErrorBody(answered));
  }

  // The accepted request's answer begins (on the strand).
  void Begin(const HostedModel& model) {
    exchange_->Keep(shared_from_this());
    exchange_->OnClientGone([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->ClientGone();
    });
    std::string first = format_->Begin(record().request_id, model);
    if (stream_answer_) {
      exchange_->StartStream("text/event-stream", {{"X-Request-Id", record().request_id}});
      if (!first.empty()) exchange_->Write(std::move(first), nullptr);
    }
  }

 private:
  // Any thread: one pump waits on the strand at a time.
  void Notify() {
    if (posted_.exchange(true)) return;
    exchange_->Post([self = shared_from_this()] {
      self->posted_.store(false);
      self->Pump();
    });
  }

  void Pump() {
    if (done_ || writing_) return;  // a finished write pumps again
    RequestStream::Taken taken = stream_->Take();
    std::string out;
    if (!taken.chunk.empty()) {
      if (stream_answer_) out = format_->Chunk(taken.chunk, first_);
      Append(taken.chunk, all_);
      first_ = false;
    }
    if (taken.summary.has_value()) {
      Finish(*taken.summary, std::move(out));
      return;
    }
    if (out.empty()) return;
    writing_ = true;
    exchange_->Write(std::move(out), [self = shared_from_this()] {
      self->writing_ = false;
      self->Pump();
    });
  }

  void Finish(const StreamSummary& summary, std::string out) {
    done_ = true;
    record().summary = summary;
    const absl::Status status =
        gone_ ? absl::CancelledError("the client went away") : format_->InTerms(summary.status);
    if (status.ok()) format_->Completed(all_, summary);
    if (!stream_answer_) {
      if (status.ok()) {
        exchange_->Respond(200, kJsonType, format_->Whole(all_, summary),
                           {{"X-Request-Id", record().request_id}});
      } else {
        RespondError(*exchange_, nullptr, status, -1, format_->ErrorBody(status));
      }
    } else {
      out += status.ok() ? format_->End(all_, summary) : format_->Error(status);
      exchange_->Write(std::move(out), nullptr);
      exchange_->EndStream();
    }
    report_->End(status);
  }

  void ClientGone() {
    gone_ = true;
    if (stream_ != nullptr) stream_->RequestCancel(FinishReason::kCancelled);
  }

  const std::shared_ptr<HttpExchange> exchange_;
  const bool stream_answer_;
  const std::unique_ptr<AnswerFormat> format_;
  std::unique_ptr<CallReport> report_;
  std::shared_ptr<RequestStream> stream_;
  std::atomic<bool> posted_{false};
  // On the strand:
  StreamChunk all_;
  bool first_ = true;
  bool writing_ = false;
  bool done_ = false;
  bool gone_ = false;
};

}  // namespace

CallReport::CallReport(const std::vector<RpcObserver*>& observers, std::string_view method,
                       const std::string& peer, std::string_view protocol)
    : observers_(observers), start_(absl::Now()) {
  record_.method = method;
  record_.protocol = protocol;
  record_.peer = peer;
  for (RpcObserver* o : observers_) o->OnRpcStart(method);
}

CallReport::~CallReport() { End(absl::CancelledError("the client went away")); }

void CallReport::End(const absl::Status& status) {
  if (ended_) return;
  ended_ = true;
  record_.status = status;
  record_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  for (RpcObserver* o : observers_) o->OnRpcEnd(record_);
}

void RespondError(HttpExchange& exchange, CallReport* report, const absl::Status& status,
                  int64_t retry_after_ms, std::string body) {
  HttpHeaders headers = RetryHeaders(status, retry_after_ms);
  if (absl::IsUnauthenticated(status)) headers.emplace_back("WWW-Authenticate", "Bearer");
  exchange.Respond(HttpStatusOf(status), kJsonType,
                   body.empty() ? ErrorJson(status) : std::move(body), headers);
  if (report != nullptr) report->End(status);
}

absl::Status CheckHttpCall(const GenerationStart& start, const HttpRequest& http) {
  if (start.tokens == nullptr) return absl::OkStatus();
  const CallGate gate{start.tokens, /*health_only=*/false, start.security_observer};
  return CheckCall(gate, http.Path(), http.Header("authorization"));
}

absl::StatusOr<Caller> HttpCaller(const GenerationStart& start, const HttpRequest& http) {
  if (start.tokens == nullptr) return Caller{};
  return start.tokens->Authenticate(http.Header("authorization"));
}

void StartHttpGeneration(ModelRepository& repository, GenerationStart start,
                         const HttpRequest& http, const std::shared_ptr<HttpExchange>& exchange,
                         const v1::GenerateRequest& wire, bool stream,
                         std::unique_ptr<AnswerFormat> format, std::unique_ptr<CallReport> report) {
  CallFacts call;
  call.caller = HttpCaller(start, http);
  if (const std::string_view routed = http.Header("x-session-id"); !routed.empty()) {
    call.routed_session_id = std::string(routed);
  }
  // A whole answer is unbounded and handed over once, as gRPC's unary
  // Generate.
  if (!stream) {
    start.buffer_tokens = 0;
    start.tokens_per_message = 0;
  }
  start.retry_pushback_metadata = false;
  auto generation =
      std::make_shared<HttpGeneration>(exchange, stream, std::move(format), std::move(report));
  int64_t retry_after_ms = -1;
  const absl::Status status = StartGeneration(
      repository, start, call, wire, generation->record(),
      [&generation](const std::string&, std::shared_ptr<RequestStream> request_stream) {
        generation->Attach(std::move(request_stream));
      },
      &retry_after_ms);
  const HostedModel* model = status.ok() ? repository.Find(generation->record().model) : nullptr;
  if (model == nullptr) {
    generation->Refuse(status.ok() ? absl::InternalError("the model went away") : status,
                       retry_after_ms);
    return;
  }
  generation->Begin(*model);
}

}  // namespace performer::server
