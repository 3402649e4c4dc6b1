// The OpenAI API's answers, as JSON text: a whole completion or chat
// completion, the chunks of a streamed one (Server-Sent Events), and the
// error object. Shapes follow OpenAI's API reference: "text_completion" /
// "chat.completion" / "chat.completion.chunk" objects, usage with
// prompt_tokens_details.cached_tokens (the prompt tokens the prefix cache or
// a session state supplied), finish_reason "stop" or "length".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/engine/request_stream.h"
#include "server/http/openai_request.h"
#include "server/tokenizer/tokenizer.h"

namespace performer::server {

// What every object of one answer repeats.
struct OpenAiAnswer {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  std::string id;  // "cmpl-<request id>" or "chatcmpl-<request id>"
  std::string model;
  int64_t created = 0;                   // Unix seconds
  bool logprobs = false;                 // the request asked for them
  const Tokenizer* tokenizer = nullptr;  // token strings in logprobs; null = ids
};

// The whole answer of a request that was not streamed: `output` is all its
// chunks together; `echo` is text put before the output (completions).
std::string CompletionJson(const OpenAiAnswer& answer, const std::string& echo,
                           const StreamChunk& output, const StreamSummary& summary);

// One streamed piece of output; `first` adds the chat delta's role.
std::string ChunkJson(const OpenAiAnswer& answer, const StreamChunk& chunk, bool first);
// The streamed chunk that carries the finish reason (and no text).
std::string FinishChunkJson(const OpenAiAnswer& answer, const StreamSummary& summary);
// stream_options.include_usage: the last chunk, with no choices.
std::string UsageChunkJson(const OpenAiAnswer& answer, const StreamSummary& summary);

// "data: <json>\n\n": one Server-Sent Event.
std::string SseEvent(const std::string& data);
inline constexpr char kSseDone[] = "data: [DONE]\n\n";

// The HTTP status of a refused or failed request: 400, 401, 403, 404, 409,
// 429, 503, 504, else 500.
int HttpStatusOf(const absl::Status& status);
// {"error": {"message", "type", "param", "code"}} for `status`, answered
// with `http_status` (its type follows that: "invalid_request_error",
// "authentication_error", ...).
std::string ErrorJson(const absl::Status& status, int http_status);
inline std::string ErrorJson(const absl::Status& status) {
  return ErrorJson(status, HttpStatusOf(status));
}

}  // namespace performer::server
