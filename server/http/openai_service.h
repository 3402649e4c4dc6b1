// The OpenAI-compatible API on the HTTP listener (http_listener.h):
//   GET  /v1/models, /v1/models/{id}
//   POST /v1/completions, /v1/chat/completions (whole, or streamed as
//        Server-Sent Events ending "data: [DONE]")
//   POST /v1/responses, GET and DELETE /v1/responses/{id}: the Responses
//        API, a stored response's conversation kept as an engine session
//        (responses_api.h, response_store.h)
// A generation takes the path every protocol shares (server/service/
// generation_start.h): the same model lookup, tokenizer, defaults, engine
// validation, limits, overload and drain answers, sessions (x-session-id)
// and observers (metrics and the request log count it under protocol
// "openai", method "models", "completions", "chat.completions" or
// "responses"). Errors
// are OpenAI's error object with the HTTP status of the failure
// (openai_response.h); 429 and 503 carry Retry-After. With bearer tokens
// every route needs "Authorization: Bearer <token>" (401 otherwise).
// A client that disconnects cancels its request within an engine step.
#pragma once

#include <memory>
#include <vector>

#include "server/http/http_listener.h"
#include "server/http/response_store.h"
#include "server/observer/rpc_observer.h"
#include "server/repository/model_repository.h"
#include "server/service/generation_start.h"

namespace performer::server {

// Stored responses kept at most (the oldest go first).
inline constexpr size_t kMaxStoredResponses = 10000;

struct OpenAiServiceOptions {
  // How generations start; buffer_tokens bounds a streamed answer's
  // unsent tokens (a whole answer is unbounded, as gRPC's unary Generate).
  GenerationStart start;
  std::vector<RpcObserver*> observers;  // not owned
};

class OpenAiService {
 public:
  OpenAiService(ModelRepository& repository, OpenAiServiceOptions options);

  // The listener's handler.
  void Handle(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);

 private:
  ModelRepository& repository_;
  const OpenAiServiceOptions options_;
  ResponseStore responses_{kMaxStoredResponses};
};

}  // namespace performer::server
