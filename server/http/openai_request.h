// The OpenAI API's generation requests (POST /v1/completions,
// /v1/chat/completions and /v1/responses) read into performer.v1.GenerateRequest, the request
// vocabulary of the shared generation path (server/service/
// generation_start.h), which validates the values themselves. This layer
// checks only the JSON: the fields OpenAI defines (types, and a clear error
// for a value we do not support), our extensions (top_k,
// repetition_penalty, ignore_eos, priority, request_id), and unknown
// fields, which OpenAI refuses too.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "performer/v1/generation.pb.h"
#include "server/repository/chat_template.h"

namespace performer::server {

enum class OpenAiEndpoint { kCompletions, kChatCompletions, kResponses };

struct OpenAiGeneration {
  v1::GenerateRequest wire;  // model, prompt (completions), sampling, stops
  // Chat: the messages, rendered through the model's chat template once the
  // model is known.
  std::vector<ChatMessage> messages;
  bool stream = false;
  bool stream_options = false;  // given (only with stream)
  bool include_usage = false;   // stream_options.include_usage
  bool echo = false;            // completions: the prompt text before the output
  bool logprobs = false;        // the sampled tokens' log-probabilities
  // Responses: the conversation to continue, whether to keep this one, and
  // what is echoed back in the response object.
  std::string previous_response_id;
  bool store = true;
  std::string instructions;
  std::string metadata_json = "{}";
};

// INVALID_ARGUMENT whose message starts with the field's name ("max_tokens:
// ...") for malformed JSON, a wrong type, an unknown field or a value we do
// not support. `body` is at most --max_message_bytes (the listener's bound).
absl::StatusOr<OpenAiGeneration> ParseOpenAiGeneration(OpenAiEndpoint endpoint,
                                                       std::string_view body);

// The parameter an error message names ("max_tokens: ..." -> "max_tokens";
// "messages[2].role: ..." -> "messages[2].role"), or nullopt.
std::optional<std::string> ErrorParam(std::string_view message);

}  // namespace performer::server
