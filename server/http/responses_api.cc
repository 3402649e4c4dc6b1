#include "server/http/responses_api.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/http/openai_request.h"
#include "server/http/openai_response.h"

namespace performer::server {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

class ResponsesFormat : public AnswerFormat {
 public:
  ResponsesFormat(ResponsesTurn turn, ResponseStore* store)
      : turn_(std::move(turn)), store_(store), created_(absl::ToUnixSeconds(absl::Now())) {}

  std::string Begin(const std::string& request_id, const HostedModel& model) override {
    id_ = absl::StrCat("resp_", request_id);
    message_id_ = absl::StrCat("msg_", request_id);
    model_ = model.name;
    tokenizer_ = model.tokenizer.get();
    json in_progress = Response("in_progress", "", nullptr);
    // One statement per event: sequence numbers follow the text's order.
    std::string out = Event("response.created", {{"response", in_progress}});
    out += Event("response.in_progress", {{"response", in_progress}});
    out += Event("response.output_item.added",
                 {{"output_index", 0}, {"item", Message("in_progress", json::array())}});
    out += Event("response.content_part.added", Part(Text("")));
    return out;
  }

  std::string Chunk(const StreamChunk& chunk, bool) override {
    if (chunk.text.empty()) return "";
    json delta = Part(nullptr);
    delta.erase("part");
    delta["delta"] = chunk.text;
    return Event("response.output_text.delta", std::move(delta));
  }

  std::string End(const StreamChunk& all, const StreamSummary& summary) override {
    json done = Part(nullptr);
    done.erase("part");
    done["text"] = all.text;
    std::string out = Event("response.output_text.done", std::move(done));
    out += Event("response.content_part.done", Part(Text(all.text)));
    out +=
        Event("response.output_item.done",
              {{"output_index", 0}, {"item", Message("completed", json::array({Text(all.text)}))}});
    out += Event(
        summary.reason == FinishReason::kLength ? "response.incomplete" : "response.completed",
        {{"response", Final(all, summary)}});
    return out;
  }

  absl::Status InTerms(const absl::Status& status) override {
    return InOpenAiTerms(status, OpenAiEndpoint::kResponses, turn_.max_tokens_param);
  }

  std::string Error(const absl::Status& status) override {
    json failed = Response("failed", "", nullptr);
    failed["error"] = {{"code", absl::AsciiStrToLower(absl::StatusCodeToString(status.code()))},
                       {"message", std::string(status.message())}};
    return Event("response.failed", {{"response", failed}});
  }

  std::string Whole(const StreamChunk& all, const StreamSummary& summary) override {
    return Dump(Final(all, summary));
  }

  void Completed(const StreamChunk& all, const StreamSummary& summary) override {
    if (!turn_.store || store_ == nullptr || turn_.session_id.empty()) return;
    StoredResponse stored;
    stored.id = id_;
    stored.owner = turn_.owner;
    stored.model = model_;
    stored.session_id = turn_.session_id;
    stored.json = Whole(all, summary);
    if (tokenizer_ != nullptr) {
      const std::string seen = tokenizer_->Decode(all.token_ids);
      if (seen.compare(0, all.text.size(), all.text) == 0)
        stored.tail = seen.substr(all.text.size());
    }
    store_->Put(std::move(stored), turn_.previous_response_id);
  }

 private:
  std::string Event(const char* type, json data) {
    data["type"] = type;
    data["sequence_number"] = sequence_++;
    return absl::StrCat("event: ", type, "\n", SseEvent(Dump(data)));
  }

  // The fields that place an event in the message's one text part.
  json Part(json part) const {
    return {{"item_id", message_id_}, {"output_index", 0}, {"content_index", 0}, {"part", part}};
  }

  static json Text(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
  }

  json Message(const char* status, json content) const {
    return {{"type", "message"},
            {"id", message_id_},
            {"status", status},
            {"role", "assistant"},
            {"content", std::move(content)}};
  }

  json Response(const char* status, const std::string& text, json usage) const {
    json output = json::array();
    if (std::string(status) != "in_progress" && std::string(status) != "failed") {
      output.push_back(Message("completed", json::array({Text(text)})));
    }
    return {{"id", id_},
            {"object", "response"},
            {"created_at", created_},
            {"status", status},
            {"model", model_},
            {"output", output},
            {"previous_response_id",
             turn_.previous_response_id.empty() ? json(nullptr) : json(turn_.previous_response_id)},
            {"store", turn_.store},
            {"instructions", turn_.instructions.empty() ? json(nullptr) : json(turn_.instructions)},
            {"max_output_tokens",
             turn_.max_output_tokens > 0 ? json(turn_.max_output_tokens) : json(nullptr)},
            {"metadata", json::parse(turn_.metadata_json)},
            {"error", nullptr},
            {"incomplete_details", nullptr},
            {"parallel_tool_calls", false},
            {"tool_choice", "none"},
            {"tools", json::array()},
            {"text", {{"format", {{"type", "text"}}}}},
            {"truncation", "disabled"},
            {"usage", std::move(usage)}};
  }

  json Final(const StreamChunk& all, const StreamSummary& summary) const {
    const bool incomplete = summary.reason == FinishReason::kLength;
    json usage = {{"input_tokens", summary.prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", summary.cached_prompt_tokens}}},
                  {"output_tokens", summary.generated_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", summary.prompt_tokens + summary.generated_tokens}};
    json response = Response(incomplete ? "incomplete" : "completed", all.text, usage);
    if (incomplete) response["incomplete_details"] = {{"reason", "max_output_tokens"}};
    return response;
  }

  const ResponsesTurn turn_;
  ResponseStore* const store_;
  const int64_t created_;
  std::string id_;
  std::string message_id_;
  std::string model_;
  const Tokenizer* tokenizer_ = nullptr;
  int64_t sequence_ = 0;
};

}  // namespace

std::unique_ptr<AnswerFormat> NewResponsesFormat(ResponsesTurn turn, ResponseStore* store) {
  return std::make_unique<ResponsesFormat>(std::move(turn), store);
}

}  // namespace performer::server
