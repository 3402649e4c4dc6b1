#include "server/logging/request_log.h"

#include <string>

#include "server/engine/generation_request.h"
#include "server/logging/server_log.h"
#include "server/logging/user_text.h"

namespace performer::server {

void RequestLog::OnRpcEnd(const RpcRecord& record) {
  RequestLogEntry entry;
  // The request id may be a refused, over-long one: the line quotes it
  // bounded.
  entry.request_id = BoundUserText(record.request_id);
  entry.model = record.model;
  entry.method = std::string(record.method);
  entry.status = absl::StatusCodeToString(record.status.code());
  entry.peer = record.peer;
  entry.caller = record.caller;
  entry.duration_seconds = record.seconds;
  if (!record.status.ok()) entry.error_message = std::string(record.status.message());
  if (record.summary.has_value()) {
    const StreamSummary& summary = *record.summary;
    if (summary.reason != FinishReason::kNone) {
      entry.finish_reason = std::string(FinishReasonName(summary.reason));
    }
    entry.prompt_tokens = summary.prompt_tokens;
    entry.generated_tokens = summary.generated_tokens;
    entry.queue_seconds = summary.queue_seconds;
    if (summary.generated_tokens > 0) entry.ttft_seconds = summary.time_to_first_token_seconds;
  }
  LogRequest(entry);
}

}  // namespace performer::server
