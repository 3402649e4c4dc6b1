// The OpenAI-compatible API on the HTTP listener (http_listener.h):
//   GET  /v1/models, /v1/models/{id}
//   POST /v1/completions, /v1/chat/completions (whole, or streamed as
//        Server-Sent Events ending "data: [DONE]")
// A generation takes the path every protocol shares (server/service/
// generation_start.h): the same model lookup, tokenizer, defaults, engine
// validation, limits, overload and drain answers, sessions (x-session-id)
// and observers (metrics and the request log count it under protocol
// "openai", method "models", "completions" or "chat.completions"). Errors
// are OpenAI's error object with the HTTP status of the failure
// (openai_response.h); 429 and 503 carry Retry-After. With bearer tokens
// every route needs "Authorization: Bearer <token>" (401 otherwise).
// A client that disconnects cancels its request within an engine step.
#pragma once

#include <memory>
#include <vector>

#include "server/http/http_listener.h"
#include "server/observer/rpc_observer.h"
#include "server/repository/model_repository.h"
#include "server/service/generation_start.h"

namespace performer::server {

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
};

}  // namespace performer::server
