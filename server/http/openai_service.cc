#include "server/http/openai_service.h"

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/http_generation.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"
#include "server/http/responses_api.h"
#include "server/logging/user_text.h"

namespace performer::server {
namespace {

using nlohmann::json;

// OpenAI's completions and chat answers (openai_response.h).
class OpenAiFormat : public AnswerFormat {
 public:
  OpenAiFormat(OpenAiEndpoint endpoint, const OpenAiGeneration& request)
      : include_usage_(request.include_usage),
        echo_(request.echo ? request.wire.prompt_text() : ""),
        max_tokens_param_(request.max_tokens_param) {
    answer_.endpoint = endpoint;
    answer_.created = absl::ToUnixSeconds(absl::Now());
    answer_.logprobs = request.logprobs;
  }

  std::string Begin(const std::string& request_id, const HostedModel& model) override {
    answer_.id = absl::StrCat(
        answer_.endpoint == OpenAiEndpoint::kChatCompletions ? "chatcmpl-" : "cmpl-", request_id);
    answer_.model = model.name;
    answer_.tokenizer = model.tokenizer.get();
    return "";
  }

  std::string Chunk(const StreamChunk& chunk, bool first) override {
    if (!first || echo_.empty()) return SseEvent(ChunkJson(answer_, chunk, first));
    StreamChunk echoed = chunk;
    echoed.text = echo_ + chunk.text;
    return SseEvent(ChunkJson(answer_, echoed, first));
  }

  std::string End(const StreamChunk& all, const StreamSummary& summary) override {
    std::string out = all.empty() && !echo_.empty()
                          ? SseEvent(ChunkJson(answer_, StreamChunk{{}, echo_, {}, 0}, true))
                          : "";
    out += SseEvent(FinishChunkJson(answer_, summary));
    if (include_usage_) out += SseEvent(UsageChunkJson(answer_, summary));
    return out + kSseDone;
  }

  std::string Error(const absl::Status& status) override {
    return SseEvent(ErrorJson(status)) + kSseDone;
  }

  std::string Whole(const StreamChunk& all, const StreamSummary& summary) override {
    return CompletionJson(answer_, echo_, all, summary);
  }

  absl::Status InTerms(const absl::Status& status) override {
    return InOpenAiTerms(status, answer_.endpoint, max_tokens_param_);
  }

 private:
  OpenAiAnswer answer_;
  const bool include_usage_;
  const std::string echo_;
  const std::string max_tokens_param_;
};

// A route: its method label for the observers and the HTTP methods it takes.
struct Route {
  std::string_view method;  // a literal: RpcRecord keeps the view
  const char* allow;
};

std::optional<Route> RouteOf(const std::string& path) {
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) return Route{"models", "GET"};
  if (path == "/v1/completions") return Route{"completions", "POST"};
  if (path == "/v1/chat/completions") return Route{"chat.completions", "POST"};
  if (path == "/v1/responses") return Route{"responses", "POST"};
  if (absl::StartsWith(path, "/v1/responses/") && path.size() > 14) {
    return Route{"responses", "GET, DELETE"};
  }
  return std::nullopt;
}

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
    exchange.Respond(200, kJsonType, json({{"object", "list"}, {"data", data}}).dump());
    return absl::OkStatus();
  }
  const std::string name = path.substr(std::string_view("/v1/models/").size());
  const HostedModel* model = name.empty() ? nullptr : repository.Find(name);
  if (model == nullptr) {
    const absl::Status status = UnknownModelError("model", name, kOpenAiModelListing);
    exchange.Respond(404, kJsonType, ErrorJson(status));
    return status;
  }
  record.model = model->name;
  exchange.Respond(200, kJsonType, ModelJson(*model, created).dump());
  return absl::OkStatus();
}

// The request's model, which must have a chat template.
absl::StatusOr<const HostedModel*> ChatModel(ModelRepository& repository,
                                             const OpenAiGeneration& request) {
  absl::StatusOr<HostedModel*> model =
      GeneratingModel(repository, request.wire.model(), kOpenAiModelListing);
  if (!model.ok()) return model.status();
  if (!(*model)->chat_template.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: ", (*model)->name,
                     " has no chat template (chat_template.json in its folder); use "
                     "/v1/completions with a prompt"));
  }
  return *model;
}

// A chat request's prompt: `prefix`, then its messages through the model's
// chat template, whose stop strings join the request's.
absl::Status RenderChat(const ChatTemplate& chat, const std::string& prefix,
                        OpenAiGeneration& request) {
  absl::StatusOr<std::string> prompt = chat.Render(request.messages);
  if (!prompt.ok()) return prompt.status();
  request.wire.set_prompt_text(prefix + *prompt);
  for (const std::string& stop : chat.stop) request.wire.add_stop_strings(stop);
  return absl::OkStatus();
}

// The Responses turn of `request`: a new stored conversation (a session
// created by this turn), the continuation of a stored response (its session,
// the template's text after the previous answer first), or nothing stored.
absl::StatusOr<ResponsesTurn> PrepareTurn(const HostedModel& model, const std::string& owner,
                                          const ResponseStore& store, OpenAiGeneration& request) {
  ResponsesTurn turn;
  turn.owner = owner;
  turn.previous_response_id = request.previous_response_id;
  turn.store = request.store;
  turn.instructions = request.instructions;
  turn.metadata_json = request.metadata_json;
  turn.max_output_tokens = request.wire.max_new_tokens();
  turn.max_tokens_param = request.max_tokens_param;
  std::string prefix;
  if (!request.previous_response_id.empty()) {
    absl::StatusOr<StoredResponse> head = store.Head(request.previous_response_id, owner);
    if (!head.ok()) return head.status();
    if (head->model != model.name) {
      return absl::InvalidArgumentError(absl::StrCat("previous_response_id: response ", head->id,
                                                     " is of model ", head->model, ", not ",
                                                     model.name));
    }
    prefix = model.chat_template->AfterAssistant(head->tail);
    turn.session_id = head->session_id;
    request.wire.set_session_id(head->session_id);
  } else if (request.store) {
    turn.session_id = RandomId("resp-");
    request.wire.set_session_id(turn.session_id);
    request.wire.set_create_session(true);
  }
  if (absl::Status s = RenderChat(*model.chat_template, prefix, request); !s.ok()) return s;
  return turn;
}

void Responses(ModelRepository& repository, const OpenAiServiceOptions& options,
               ResponseStore& store, const HttpRequest& http,
               const std::shared_ptr<HttpExchange>& exchange, std::unique_ptr<CallReport> report) {
  absl::StatusOr<OpenAiGeneration> request =
      ParseOpenAiGeneration(OpenAiEndpoint::kResponses, http.body);
  const absl::StatusOr<Caller> caller = HttpCaller(options.start, http);
  absl::StatusOr<const HostedModel*> model =
      request.ok() ? ChatModel(repository, *request) : request.status();
  absl::StatusOr<ResponsesTurn> turn = model.ok() && caller.ok()
                                           ? PrepareTurn(**model, caller->name, store, *request)
                                           : (caller.ok() ? model.status() : caller.status());
  if (!turn.ok()) {
    RespondError(*exchange, report.get(), turn.status());
    return;
  }
  StartHttpGeneration(repository, options.start, http, exchange, request->wire, request->stream,
                      NewResponsesFormat(*std::move(turn), &store), std::move(report));
}

// GET or DELETE /v1/responses/{id}; returns what was answered.
absl::Status StoredResponseCall(ModelRepository& repository, const OpenAiServiceOptions& options,
                                ResponseStore& store, const HttpRequest& http,
                                const std::string& id, HttpExchange& exchange) {
  const absl::StatusOr<Caller> caller = HttpCaller(options.start, http);
  absl::StatusOr<StoredResponse> found = !caller.ok()
                                             ? absl::StatusOr<StoredResponse>(caller.status())
                                         : http.method == "GET" ? store.Get(id, caller->name)
                                                                : store.Delete(id, caller->name);
  if (!found.ok()) {
    RespondError(exchange, nullptr, found.status());
    return found.status();
  }
  if (http.method == "GET") {
    exchange.Respond(200, kJsonType, found->json);
    return absl::OkStatus();
  }
  // The head of a conversation holds its session: it goes too.
  if (found->continued_by.empty()) {
    if (HostedModel* model = repository.Find(found->model); model && model->engine) {
      model->engine->DeleteSession(found->session_id, found->owner).IgnoreError();
    }
  }
  exchange.Respond(200, kJsonType,
                   json({{"id", id}, {"object", "response"}, {"deleted", true}}).dump());
  return absl::OkStatus();
}

void Generate(ModelRepository& repository, const OpenAiServiceOptions& options,
              OpenAiEndpoint endpoint, const HttpRequest& http,
              const std::shared_ptr<HttpExchange>& exchange, std::unique_ptr<CallReport> report) {
  absl::StatusOr<OpenAiGeneration> request = ParseOpenAiGeneration(endpoint, http.body);
  absl::Status status = request.status();
  if (status.ok() && endpoint == OpenAiEndpoint::kChatCompletions) {
    absl::StatusOr<const HostedModel*> model = ChatModel(repository, *request);
    status = model.ok() ? RenderChat(*(*model)->chat_template, "", *request) : model.status();
  }
  if (!status.ok()) {
    RespondError(*exchange, report.get(), status);
    return;
  }
  auto format = std::make_unique<OpenAiFormat>(endpoint, *request);
  StartHttpGeneration(repository, options.start, http, exchange, request->wire, request->stream,
                      std::move(format), std::move(report));
}

// The options with the OpenAI API's model listing named in errors.
OpenAiServiceOptions WithOpenAiModelListing(OpenAiServiceOptions options) {
  options.start.model_listing = kOpenAiModelListing;
  return options;
}

}  // namespace

OpenAiService::OpenAiService(ModelRepository& repository, OpenAiServiceOptions options)
    : repository_(repository), options_(WithOpenAiModelListing(std::move(options))) {}

void OpenAiService::Handle(const HttpRequest& request,
                           const std::shared_ptr<HttpExchange>& exchange) {
  const std::string path = request.Path();
  const std::optional<Route> route = RouteOf(path);
  if (!route.has_value()) {
    RespondError(*exchange, nullptr,
                 absl::NotFoundError(
                     absl::StrCat("no route for ", BoundUserText(path), " (see docs/http.md)")));
    return;
  }
  auto report = std::make_unique<CallReport>(options_.observers, route->method, request.peer);
  if (!absl::StrContains(route->allow, request.method) || request.method.empty()) {
    const absl::Status status = absl::InvalidArgumentError(absl::StrCat(
        "method: ", path, " takes ", route->allow, ", not ", BoundUserText(request.method)));
    exchange->Respond(405, kJsonType, ErrorJson(status, 405), {{"Allow", route->allow}});
    report->End(status);
    return;
  }
  if (absl::Status s = CheckHttpCall(options_.start, request); !s.ok()) {
    RespondError(*exchange, report.get(), s);
    return;
  }
  if (route->method == "models") {
    report->End(ListModels(repository_, path, *exchange, report->record()));
  } else if (route->method == "responses" && path != "/v1/responses") {
    const std::string id = path.substr(std::string_view("/v1/responses/").size());
    report->End(StoredResponseCall(repository_, options_, responses_, request, id, *exchange));
  } else if (route->method == "responses") {
    Responses(repository_, options_, responses_, request, exchange, std::move(report));
  } else {
    Generate(repository_, options_,
             route->method == "completions" ? OpenAiEndpoint::kCompletions
                                            : OpenAiEndpoint::kChatCompletions,
             request, exchange, std::move(report));
  }
}

}  // namespace performer::server
