// The OpenAI Responses API's answers (POST /v1/responses): the response
// object ("object": "response", output as one assistant message of
// output_text, usage with input_tokens_details.cached_tokens) and, streamed,
// its typed events ("event: response.output_text.delta", ...,
// "response.completed"), as OpenAI's API reference shapes them. A stored
// response (store: true) goes into the ResponseStore when it completes.
#pragma once

#include <memory>
#include <string>

#include "server/http/http_generation.h"
#include "server/http/openai_request.h"
#include "server/http/response_store.h"

namespace performer::server {

struct ResponsesTurn {
  std::string owner;       // the caller
  std::string session_id;  // "" = not stored
  std::string previous_response_id;
  bool store = false;
  std::string instructions;
  std::string metadata_json = "{}";
  int32_t max_output_tokens = 0;                       // 0 = the model's default
  std::string max_tokens_param = "max_output_tokens";  // OpenAiGeneration's
};

// The AnswerFormat of one Responses request; stores into `store` (not
// owned) on success when turn.store.
std::unique_ptr<AnswerFormat> NewResponsesFormat(ResponsesTurn turn, ResponseStore* store);

}  // namespace performer::server
