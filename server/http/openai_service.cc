#include "server/http/openai_service.h"

#include <atomic>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/logging/user_text.h"
#include "server/security/call_gate.h"

namespace performer::server {
namespace {

using nlohmann::json;

constexpr std::string_view kJson = "application/json";

// One call's record for the observers: started on construction, reported
// once by End() (or, for an answer abandoned without one, the destructor).
class CallReport {
 public:
  CallReport(const std::vector<RpcObserver*>& observers, std::string_view method,
             const std::string& peer)
      : observers_(observers), start_(absl::Now()) {
    record_.method = method;
    record_.protocol = kOpenAiProtocol;
    record_.peer = peer;
    for (RpcObserver* o : observers_) o->OnRpcStart(method);
  }
  CallReport(const CallReport&) = delete;
  CallReport& operator=(const CallReport&) = delete;
  ~CallReport() { End(absl::CancelledError("the client went away")); }

  RpcRecord& record() { return record_; }
  void End(const absl::Status& status) {
    if (ended_) return;
    ended_ = true;
    record_.status = status;
    record_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    for (RpcObserver* o : observers_) o->OnRpcEnd(record_);
  }

 private:
  const std::vector<RpcObserver*>& observers_;
  const absl::Time start_;
  RpcRecord record_;
  bool ended_ = false;
};

// Retry-After (seconds, at least 1) for an overloaded or draining server.
HttpHeaders RetryHeaders(const absl::Status& status, int64_t retry_after_ms) {
  if (!absl::IsResourceExhausted(status) && !absl::IsUnavailable(status)) return {};
  const int64_t seconds = std::max<int64_t>(1, (retry_after_ms + 999) / 1000);
  return {{"Retry-After", absl::StrCat(seconds)}};
}

void RespondError(HttpExchange& exchange, CallReport* report, const absl::Status& status,
                  int64_t retry_after_ms = -1) {
  HttpHeaders headers = RetryHeaders(status, retry_after_ms);
  if (absl::IsUnauthenticated(status)) headers.emplace_back("WWW-Authenticate", "Bearer");
  exchange.Respond(HttpStatusOf(status), kJson, ErrorJson(status), headers);
  if (report != nullptr) report->End(status);
}

// One generation answered over HTTP: takes the engine's output on the
// exchange's strand, one write at a time (the RequestStream's bound is the
// backpressure), and answers it whole or as Server-Sent Events.
class HttpGeneration : public std::enable_shared_from_this<HttpGeneration> {
 public:
  HttpGeneration(std::shared_ptr<HttpExchange> exchange, OpenAiGeneration request,
                 OpenAiAnswer answer, std::unique_ptr<CallReport> report)
      : exchange_(std::move(exchange)),
        request_(std::move(request)),
        answer_(std::move(answer)),
        report_(std::move(report)) {}

  RpcRecord& record() { return report_->record(); }

  // StartGeneration's attach: before the engine can produce.
  void Attach(const std::string& request_id, std::shared_ptr<RequestStream> stream) {
    answer_.id = absl::StrCat(
        answer_.endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", request_id);
    stream_ = std::move(stream);
    stream_->SetListener([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->Notify();
    });
  }

  // A refused request: answered at once.
  void Refuse(const absl::Status& status, int64_t retry_after_ms) {
    done_ = true;
    RespondError(*exchange_, report_.get(), status, retry_after_ms);
  }

  void SetTokenizer(const Tokenizer* tokenizer) { answer_.tokenizer = tokenizer; }

  // The accepted request's answer begins (on the strand).
  void Begin() {
    answer_.model = record().model;
    exchange_->Keep(shared_from_this());
    exchange_->OnClientGone([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->ClientGone();
    });
    if (request_.stream) {
      exchange_->StartStream("text/event-stream", {{"X-Request-Id", record().request_id}});
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
      if (request_.echo && first_)
        taken.chunk.text = request_.wire.prompt_text() + taken.chunk.text;
      if (request_.stream) {
        out = SseEvent(ChunkJson(answer_, taken.chunk, first_));
      } else {
        Collect(taken.chunk);
      }
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

  void Collect(const StreamChunk& chunk) {
    collected_.text += chunk.text;
    collected_.token_ids.insert(collected_.token_ids.end(), chunk.token_ids.begin(),
                                chunk.token_ids.end());
    collected_.logprobs.insert(collected_.logprobs.end(), chunk.logprobs.begin(),
                               chunk.logprobs.end());
  }

  void Finish(const StreamSummary& summary, std::string out) {
    done_ = true;
    record().summary = summary;
    const absl::Status status =
        gone_ ? absl::CancelledError("the client went away") : summary.status;
    if (!request_.stream) {
      if (status.ok()) {
        const std::string echo = request_.echo && first_ ? request_.wire.prompt_text() : "";
        exchange_->Respond(200, kJson, CompletionJson(answer_, echo, collected_, summary),
                           {{"X-Request-Id", record().request_id}});
      } else {
        RespondError(*exchange_, nullptr, status);
      }
    } else {
      if (status.ok()) {
        out += SseEvent(FinishChunkJson(answer_, summary));
        if (request_.include_usage) out += SseEvent(UsageChunkJson(answer_, summary));
      } else {
        out += SseEvent(ErrorJson(status));
      }
      out += kSseDone;
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
  const OpenAiGeneration request_;
  OpenAiAnswer answer_;
  std::unique_ptr<CallReport> report_;
  std::shared_ptr<RequestStream> stream_;
  std::atomic<bool> posted_{false};
  // On the strand:
  StreamChunk collected_;
  bool first_ = true;
  bool writing_ = false;
  bool done_ = false;
  bool gone_ = false;
};

std::string PathOf(const std::string& target) { return target.substr(0, target.find('?')); }

json ModelJson(const HostedModel& model, int64_t created) {
  return {{"id", model.name},
          {"object", "model"},
          {"created", created},
          {"owned_by", "performer-serve"},
          {"max_model_len", model.max_sequence_length}};
}

// GET /v1/models or /v1/models/{id}; returns what was answered.
absl::Status ListModels(ModelRepository& repository, const std::string& path,
                        HttpExchange& exchange, RpcRecord& record) {
  static const int64_t created = absl::ToUnixSeconds(absl::Now());
  if (path == "/v1/models") {
    json data = json::array();
    for (const auto& model : repository.models()) data.push_back(ModelJson(*model, created));
    exchange.Respond(200, kJson, json({{"object", "list"}, {"data", data}}).dump());
    return absl::OkStatus();
  }
  const std::string name = path.substr(std::string_view("/v1/models/").size());
  const HostedModel* model = name.empty() ? nullptr : repository.Find(name);
  if (model == nullptr) {
    const absl::Status status = UnknownModelError("model", name);
    exchange.Respond(404, kJson, ErrorJson(status));
    return status;
  }
  record.model = model->name;
  exchange.Respond(200, kJson, ModelJson(*model, created).dump());
  return absl::OkStatus();
}

// A chat request's prompt: its messages through the model's chat template,
// whose stop strings join the request's.
absl::Status RenderChat(ModelRepository& repository, OpenAiGeneration& request) {
  absl::StatusOr<HostedModel*> model = GeneratingModel(repository, request.wire.model());
  if (!model.ok()) return model.status();
  if (!(*model)->chat_template.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: ", (*model)->name,
                     " has no chat template (chat_template.json in its folder); use "
                     "/v1/completions with a prompt"));
  }
  const ChatTemplate& chat = *(*model)->chat_template;
  absl::StatusOr<std::string> prompt = chat.Render(request.messages);
  if (!prompt.ok()) return prompt.status();
  request.wire.set_prompt_text(*std::move(prompt));
  for (const std::string& stop : chat.stop) request.wire.add_stop_strings(stop);
  return absl::OkStatus();
}

void Generate(ModelRepository& repository, const OpenAiServiceOptions& options,
              OpenAiEndpoint endpoint, const HttpRequest& http,
              const std::shared_ptr<HttpExchange>& exchange, std::unique_ptr<CallReport> report) {
  absl::StatusOr<OpenAiGeneration> request = ParseOpenAiGeneration(endpoint, http.body);
  absl::Status status = request.status();
  if (status.ok() && endpoint == OpenAiEndpoint::kChatCompletions) {
    status = RenderChat(repository, *request);
  }
  if (!status.ok()) {
    RespondError(*exchange, report.get(), status);
    return;
  }
  CallFacts call;
  if (options.start.tokens != nullptr) {
    call.caller = options.start.tokens->Authenticate(http.Header("authorization"));
  }
  if (const std::string_view routed = http.Header("x-session-id"); !routed.empty()) {
    call.routed_session_id = std::string(routed);
  }
  GenerationStart start = options.start;
  start.buffer_tokens = request->stream ? options.start.buffer_tokens : 0;
  start.retry_pushback_metadata = false;
  OpenAiAnswer answer;
  answer.endpoint = endpoint;
  answer.created = absl::ToUnixSeconds(absl::Now());
  answer.logprobs = request->logprobs;
  const v1::GenerateRequest wire = request->wire;
  auto generation =
      std::make_shared<HttpGeneration>(exchange, *std::move(request), answer, std::move(report));
  int64_t retry_after_ms = -1;
  status = StartGeneration(
      repository, start, call, wire, generation->record(),
      [&generation](const std::string& request_id, std::shared_ptr<RequestStream> stream) {
        generation->Attach(request_id, std::move(stream));
      },
      &retry_after_ms);
  if (!status.ok()) {
    generation->Refuse(status, retry_after_ms);
    return;
  }
  if (const HostedModel* model = repository.Find(generation->record().model)) {
    generation->SetTokenizer(model->tokenizer.get());
  }
  generation->Begin();
}

}  // namespace

OpenAiService::OpenAiService(ModelRepository& repository, OpenAiServiceOptions options)
    : repository_(repository), options_(std::move(options)) {}

void OpenAiService::Handle(const HttpRequest& request,
                           const std::shared_ptr<HttpExchange>& exchange) {
  const std::string path = PathOf(request.target);
  const bool models = path == "/v1/models" || absl::StartsWith(path, "/v1/models/");
  const bool completions = path == "/v1/completions";
  const bool chat = path == "/v1/chat/completions";
  if (!models && !completions && !chat) {
    RespondError(*exchange, nullptr,
                 absl::NotFoundError(
                     absl::StrCat("no route for ", BoundUserText(path), " (see docs/http.md)")));
    return;
  }
  const std::string_view method = models        ? "models"
                                  : completions ? "completions"
                                                : "chat.completions";
  auto report = std::make_unique<CallReport>(options_.observers, method, request.peer);
  if (request.method != (models ? "GET" : "POST")) {
    exchange->Respond(405, kJson,
                      ErrorJson(absl::InvalidArgumentError(
                          absl::StrCat("method: ", path, " takes ", models ? "GET" : "POST",
                                       ", not ", BoundUserText(request.method)))),
                      {{"Allow", models ? "GET" : "POST"}});
    report->End(absl::InvalidArgumentError("method not allowed"));
    return;
  }
  if (options_.start.tokens != nullptr) {
    const CallGate gate{options_.start.tokens, /*health_only=*/false,
                        options_.start.security_observer};
    if (absl::Status s = CheckCall(gate, path, request.Header("authorization")); !s.ok()) {
      RespondError(*exchange, report.get(), s);
      return;
    }
  }
  if (models) {
    report->End(ListModels(repository_, path, *exchange, report->record()));
    return;
  }
  Generate(repository_, options_,
           completions ? OpenAiEndpoint::kCompletions : OpenAiEndpoint::kChatCompletions, request,
           exchange, std::move(report));
}

}  // namespace performer::server
