#include "server/http/openai_response.h"

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace performer::server {
namespace {

using nlohmann::json;

// Text the model produced may end inside a UTF-8 character only where the
// detokenizer holds the rest back; anything else invalid is replaced rather
// than failing the answer.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

const char* OpenAiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEos:
    case FinishReason::kStopToken:
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kCancelled:
    case FinishReason::kDeadline:
      return "abort";
    case FinishReason::kNone:
    case FinishReason::kError:
      break;
  }
  return "error";
}

json Usage(const StreamSummary& summary) {
  return {{"prompt_tokens", summary.prompt_tokens},
          {"completion_tokens", summary.generated_tokens},
          {"total_tokens", summary.prompt_tokens + summary.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", summary.cached_prompt_tokens}}}};
}

std::string TokenText(const OpenAiAnswer& answer, int32_t id) {
  return answer.tokenizer != nullptr ? answer.tokenizer->Decode({id}) : absl::StrCat(id);
}

json Logprobs(const OpenAiAnswer& answer, const StreamChunk& chunk) {
  if (!answer.logprobs) return nullptr;
  const size_t n = std::min(chunk.token_ids.size(), chunk.logprobs.size());
  if (answer.endpoint == OpenAiEndpoint::kChatCompletions) {
    json content = json::array();
    for (size_t i = 0; i < n; ++i) {
      const std::string token = TokenText(answer, chunk.token_ids[i]);
      json bytes = json::array();
      for (const unsigned char c : token) bytes.push_back(c);
      content.push_back({{"token", token},
                         {"logprob", chunk.logprobs[i]},
                         {"bytes", bytes},
                         {"top_logprobs", json::array()}});
    }
    return {{"content", content}};
  }
  json tokens = json::array();
  json values = json::array();
  for (size_t i = 0; i < n; ++i) {
    tokens.push_back(TokenText(answer, chunk.token_ids[i]));
    values.push_back(chunk.logprobs[i]);
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", nullptr}};
}

json Envelope(const OpenAiAnswer& answer, bool chunk) {
  const bool chat = answer.endpoint == OpenAiEndpoint::kChatCompletions;
  return {
      {"id", answer.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"},
      {"created", answer.created},
      {"model", answer.model}};
}

// One choice of a streamed chunk: text, or the chat delta.
json StreamChoice(const OpenAiAnswer& answer, const std::string& text, json delta_extra,
                  json logprobs, json finish_reason) {
  json choice = {
      {"index", 0}, {"logprobs", std::move(logprobs)}, {"finish_reason", std::move(finish_reason)}};
  if (answer.endpoint == OpenAiEndpoint::kChatCompletions) {
    json delta = std::move(delta_extra);
    if (!text.empty()) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  return choice;
}

const char* ErrorType(int http_status) {
  switch (http_status) {
    case 400:
    case 404:
    case 405:
    case 409:
    case 413:
    case 431:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return "server_error";
  }
}

}  // namespace

std::string CompletionJson(const OpenAiAnswer& answer, const std::string& echo,
                           const StreamChunk& output, const StreamSummary& summary) {
  json j = Envelope(answer, /*chunk=*/false);
  json choice = {{"index", 0},
                 {"logprobs", Logprobs(answer, output)},
                 {"finish_reason", OpenAiFinishReason(summary.reason)}};
  if (answer.endpoint == OpenAiEndpoint::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", output.text}};
  } else {
    choice["text"] = echo + output.text;
  }
  j["choices"] = json::array({choice});
  j["usage"] = Usage(summary);
  return Dump(j);
}

std::string ChunkJson(const OpenAiAnswer& answer, const StreamChunk& chunk, bool first) {
  json j = Envelope(answer, /*chunk=*/true);
  json delta = json::object();
  if (first) delta = {{"role", "assistant"}, {"content", ""}};
  j["choices"] =
      json::array({StreamChoice(answer, chunk.text, delta, Logprobs(answer, chunk), nullptr)});
  return Dump(j);
}

std::string FinishChunkJson(const OpenAiAnswer& answer, const StreamSummary& summary) {
  json j = Envelope(answer, /*chunk=*/true);
  j["choices"] = json::array(
      {StreamChoice(answer, "", json::object(), nullptr, OpenAiFinishReason(summary.reason))});
  return Dump(j);
}

std::string UsageChunkJson(const OpenAiAnswer& answer, const StreamSummary& summary) {
  json j = Envelope(answer, /*chunk=*/true);
  j["choices"] = json::array();
  j["usage"] = Usage(summary);
  return Dump(j);
}

std::string SseEvent(const std::string& data) { return absl::StrCat("data: ", data, "\n\n"); }

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status, int http) {
  const std::optional<std::string> param =
      ErrorParam(std::string_view(status.message().data(), status.message().size()));
  json error = {{"message", std::string(status.message())},
                {"type", ErrorType(http)},
                {"param", param.has_value() ? json(*param) : json(nullptr)},
                {"code", absl::AsciiStrToLower(absl::StatusCodeToString(status.code()))}};
  return Dump({{"error", error}});
}

}  // namespace performer::server
