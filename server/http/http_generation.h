// One generation answered over HTTP, whatever the API: the call's record for
// the observers (CallReport), the start through the shared generation path
// with the HTTP call's facts (bearer token, x-session-id), and the answer
// made on the exchange's strand from the engine's output, one write at a
// time (the RequestStream's bound is the backpressure), whole or streamed.
// What the answer looks like is the AnswerFormat's: OpenAI's completions
// and chat (openai_response.h) or its Responses API (responses_api.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "performer/v1/generation.pb.h"
#include "server/engine/request_stream.h"
#include "server/http/http_listener.h"
#include "server/observer/rpc_observer.h"
#include "server/repository/model_repository.h"
#include "server/service/generation_start.h"

namespace performer::server {

inline constexpr std::string_view kJsonType = "application/json";

// One call's record for the observers (protocol "openai"): started on
// construction, reported once by End() (or, for an answer abandoned without
// one, by the destructor as CANCELLED).
class CallReport {
 public:
  CallReport(const std::vector<RpcObserver*>& observers, std::string_view method,
             const std::string& peer, std::string_view protocol = kOpenAiProtocol);
  CallReport(const CallReport&) = delete;
  CallReport& operator=(const CallReport&) = delete;
  ~CallReport();

  RpcRecord& record() { return record_; }
  void End(const absl::Status& status);

 private:
  const std::vector<RpcObserver*>& observers_;
  const absl::Time start_;
  RpcRecord record_;
  bool ended_ = false;
};

// Answers `status` with its HTTP status (429 and 503 with Retry-After from
// `retry_after_ms`, 401 with WWW-Authenticate) and `body` (empty: OpenAI's
// error object), and ends `report` (when not null) with it.
void RespondError(HttpExchange& exchange, CallReport* report, const absl::Status& status,
                  int64_t retry_after_ms = -1, std::string body = "");

// What an API's answer looks like. Runs on the exchange's strand.
class AnswerFormat {
 public:
  virtual ~AnswerFormat() = default;
  // The request was accepted (its id and the resolved model are known);
  // returns what a stream sends first.
  virtual std::string Begin(const std::string& request_id, const HostedModel& model) = 0;
  // One streamed piece of output (`first`: the first piece).
  virtual std::string Chunk(const StreamChunk& chunk, bool first) = 0;
  // The end of a stream that succeeded; `all` is the whole output.
  virtual std::string End(const StreamChunk& all, const StreamSummary& summary) = 0;
  // The end of a stream that failed after it began.
  virtual std::string Error(const absl::Status& status) = 0;
  // The whole answer of a request that was not streamed and succeeded.
  virtual std::string Whole(const StreamChunk& all, const StreamSummary& summary) = 0;
  // After a success (streamed or not): keeps what the API keeps.
  virtual void Completed(const StreamChunk& all, const StreamSummary& summary) {}
  // A failure in the API's words, and its error body (empty: OpenAI's).
  virtual absl::Status InTerms(const absl::Status& status) { return status; }
  virtual std::string ErrorBody(const absl::Status& status) { return ""; }
};

// The gate every HTTP route but health passes with bearer tokens (`tokens`
// not null): CheckCall (server/security/call_gate.h) on the request's path
// and Authorization header; OK without tokens.
absl::Status CheckHttpCall(const GenerationStart& start, const HttpRequest& http);

// The caller of a request that passed the gate: its token's caller, or the
// anonymous Caller{} without tokens; UNAUTHENTICATED for a token revoked
// since (a reload in between).
absl::StatusOr<Caller> HttpCaller(const GenerationStart& start, const HttpRequest& http);

// Starts `wire` through StartGeneration (the HTTP call's caller, its
// x-session-id header) and answers it with `format` on `exchange`: refused
// requests at once with their error, accepted ones as they produce.
void StartHttpGeneration(ModelRepository& repository, GenerationStart start,
                         const HttpRequest& http, const std::shared_ptr<HttpExchange>& exchange,
                         const v1::GenerateRequest& wire, bool stream,
                         std::unique_ptr<AnswerFormat> format, std::unique_ptr<CallReport> report);

}  // namespace performer::server
