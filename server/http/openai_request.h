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
  // The parameter that set wire.max_new_tokens, as the client spelled it
  // (max_tokens, max_completion_tokens or max_output_tokens), or the
  // endpoint's own when none was given.
  std::string max_tokens_param = "max_tokens";
};

// INVALID_ARGUMENT whose message starts with the field's name ("max_tokens:
// ...") for malformed JSON, a wrong type, an unknown field or a value we do
// not support. `body` is at most --max_message_bytes (the listener's bound).
absl::StatusOr<OpenAiGeneration> ParseOpenAiGeneration(OpenAiEndpoint endpoint,
                                                       std::string_view body);

// The parameter an error message names ("max_tokens: ..." -> "max_tokens";
// "messages[2].role: ..." -> "messages[2].role"), or nullopt.
std::optional<std::string> ErrorParam(std::string_view message);

// A refusal of the shared generation path, which names performer.v1's
// fields ("max_new_tokens 9000 exceeds ..."), in the words of the request's
// endpoint: each field renamed to the parameter that set it (max_new_tokens
// to max_tokens_param, OpenAiGeneration's; prompt_text and prompt_tokens to prompt,
// messages or input; stop_strings to stop) wherever it is named, and a
// leading parameter followed by its colon ("max_tokens: 9000 exceeds ..."),
// so that the error's param (ErrorParam) is what the client sent. Other
// codes, and flags (--max_new_tokens_limit), are kept.
absl::Status InOpenAiTerms(const absl::Status& status, OpenAiEndpoint endpoint,
                           std::string_view max_tokens_param);

}  // namespace performer::server
