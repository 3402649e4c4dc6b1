#include "server/http/openai_request.h"

#include <gtest/gtest.h>

#include <string>

namespace performer::server {
namespace {

absl::StatusOr<OpenAiGeneration> Completion(const std::string& body) {
  return ParseOpenAiGeneration(OpenAiEndpoint::kCompletions, body);
}
absl::StatusOr<OpenAiGeneration> Chat(const std::string& body) {
  return ParseOpenAiGeneration(OpenAiEndpoint::kChatCompletions, body);
}

// The request is refused INVALID_ARGUMENT with a message that starts with
// `field`.
void ExpectRefused(const absl::StatusOr<OpenAiGeneration>& parsed, const std::string& field) {
  ASSERT_FALSE(parsed.ok()) << "accepted; expected an error naming " << field;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(parsed.status().message()).rfind(field, 0), 0u) << parsed.status();
}

TEST(OpenAiRequestTest, CompletionFieldsFillTheGenerateRequest) {
  absl::StatusOr<OpenAiGeneration> r = Completion(
      R"({"model": "m", "prompt": "Once", "max_tokens": 16, "temperature": 0.5, "top_p": 0.9,
          "seed": 7, "stop": ["\n", "."], "stream": true, "stream_options": {"include_usage": true},
          "logprobs": 0, "echo": true, "user": "u", "n": 1, "top_k": 4,
          "repetition_penalty": 1.1, "ignore_eos": true, "priority": 2, "request_id": "r1",
          "frequency_penalty": 0, "presence_penalty": 0.0, "logit_bias": {}, "suffix": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::GenerateRequest& w = r->wire;
  EXPECT_EQ(w.model(), "m");
  EXPECT_EQ(w.prompt_text(), "Once");
  EXPECT_EQ(w.max_new_tokens(), 16);
  EXPECT_FLOAT_EQ(w.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(w.top_p(), 0.9f);
  EXPECT_EQ(w.seed(), 7u);
  ASSERT_EQ(w.stop_strings_size(), 2);
  EXPECT_EQ(w.stop_strings(0), "\n");
  EXPECT_EQ(w.top_k(), 4);
  EXPECT_FLOAT_EQ(w.repetition_penalty(), 1.1f);
  EXPECT_TRUE(w.ignore_eos());
  EXPECT_EQ(w.priority(), 2);
  EXPECT_EQ(w.request_id(), "r1");
  EXPECT_TRUE(w.return_logprobs());
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->echo);
}

TEST(OpenAiRequestTest, PromptTokenIdsAndABatchOfOne) {
  absl::StatusOr<OpenAiGeneration> ids = Completion(R"({"model": "m", "prompt": [5, 6, 7]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->wire.prompt_tokens().ids_size(), 3);
  absl::StatusOr<OpenAiGeneration> nested = Completion(R"({"model": "m", "prompt": [[5, 6]]})");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(nested->wire.prompt_tokens().ids_size(), 2);
  absl::StatusOr<OpenAiGeneration> one = Completion(R"({"model": "m", "prompt": ["Hi"]})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->wire.prompt_text(), "Hi");
  // null is "not given": the defaults stay.
  absl::StatusOr<OpenAiGeneration> nulls =
      Completion(R"({"model": "m", "prompt": "a", "max_tokens": null, "temperature": null})");
  ASSERT_TRUE(nulls.ok()) << nulls.status();
  EXPECT_EQ(nulls->wire.max_new_tokens(), 0);
  EXPECT_FALSE(nulls->wire.has_temperature());
}

TEST(OpenAiRequestTest, RefusalsNameTheField) {
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "best_of_all": 1})"), "best_of_all");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "max_tokens": "8"})"), "max_tokens");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "max_tokens": 0})"), "max_tokens");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "max_tokens": 3000000000})"),
                "max_tokens");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "temperature": "hot"})"),
                "temperature");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "n": 2})"), "n");
  ExpectRefused(Completion(R"({"model": "m", "prompt": ["a", "b"]})"), "prompt");
  ExpectRefused(Completion(R"({"model": "m", "prompt": [1, -1]})"), "prompt");
  ExpectRefused(Completion(R"({"model": "m", "prompt": {}})"), "prompt");
  ExpectRefused(Completion(R"({"model": "m"})"), "prompt");
  ExpectRefused(Completion(R"({"prompt": "a"})"), "model");
  ExpectRefused(Completion(R"({"model": 3, "prompt": "a"})"), "model");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "stop": ["a","b","c","d","e"]})"),
                "stop");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "stream_options": {}})"),
                "stream_options");
  ExpectRefused(
      Completion(R"({"model": "m", "prompt": "a", "stream": true, "stream_options": {"x": 1}})"),
      "stream_options");
  ExpectRefused(Completion(R"({"model": "m", "prompt": [1], "echo": true})"), "echo");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "logprobs": 3})"), "logprobs");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "suffix": "z"})"), "suffix");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "frequency_penalty": 0.5})"),
                "frequency_penalty");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "logit_bias": {"1": 2}})"),
                "logit_bias");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "stream": "yes"})"), "stream");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "temperature": 1e300})"),
                "temperature");
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a")"), "request body");
  ExpectRefused(Completion(R"([1, 2])"), "request body");
  ExpectRefused(Completion(std::string(100, '[') + std::string(100, ']')), "request body");
  // Chat-only and completions-only fields stay on their side.
  ExpectRefused(Completion(R"({"model": "m", "prompt": "a", "messages": []})"), "messages");
  ExpectRefused(Chat(R"({"model": "m", "messages": [{"role": "user", "content": "a"}],
                         "echo": true})"),
                "echo");
}

TEST(OpenAiRequestTest, ChatMessages) {
  absl::StatusOr<OpenAiGeneration> r = Chat(
      R"({"model": "m", "messages": [{"role": "system", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}], "name": "ann"},
          {"role": "assistant", "content": null}],
          "max_completion_tokens": 8, "logprobs": true, "top_logprobs": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].content, "Hi there");
  EXPECT_EQ(r->messages[2].content, "");
  EXPECT_EQ(r->wire.max_new_tokens(), 8);
  EXPECT_TRUE(r->wire.return_logprobs());

  ExpectRefused(Chat(R"({"model": "m"})"), "messages");
  ExpectRefused(Chat(R"({"model": "m", "messages": []})"), "messages");
  ExpectRefused(Chat(R"({"model": "m", "messages": ["hi"]})"), "messages[0]");
  ExpectRefused(Chat(R"({"model": "m", "messages": [{"content": "a"}]})"), "messages[0].role");
  ExpectRefused(Chat(R"({"model": "m", "messages": [{"role": "user", "content": 5}]})"),
                "messages[0].content");
  ExpectRefused(
      Chat(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
      "messages[0].content");
  ExpectRefused(
      Chat(R"({"model": "m", "messages": [{"role": "user", "content": "a", "tool_calls": []}]})"),
      "messages[0]");
  ExpectRefused(
      Chat(R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "tools": []})"),
      "tools");
  ExpectRefused(
      Chat(R"({"model": "m", "messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})"),
      "top_logprobs");
}

TEST(OpenAiRequestTest, ResponsesInput) {
  absl::StatusOr<OpenAiGeneration> r =
      ParseOpenAiGeneration(OpenAiEndpoint::kResponses,
                            R"({"model": "m", "input": [{"type": "message", "role": "user",
          "content": [{"type": "input_text", "text": "Hi"}]}], "instructions": "Be brief.",
          "previous_response_id": "resp_1", "store": false, "max_output_tokens": 9,
          "metadata": {"k": "v"}, "text": {"format": {"type": "text"}}, "truncation": "disabled"})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "Be brief.");
  EXPECT_EQ(r->messages[1].content, "Hi");
  EXPECT_EQ(r->previous_response_id, "resp_1");
  EXPECT_FALSE(r->store);
  EXPECT_EQ(r->wire.max_new_tokens(), 9);
  EXPECT_EQ(r->metadata_json, "{\"k\":\"v\"}");
  absl::StatusOr<OpenAiGeneration> text =
      ParseOpenAiGeneration(OpenAiEndpoint::kResponses, R"({"model": "m", "input": "Hi"})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(text->store);
  EXPECT_EQ(text->messages[0].role, "user");
  auto responses = [](const std::string& body) {
    return ParseOpenAiGeneration(OpenAiEndpoint::kResponses, body);
  };
  ExpectRefused(responses(R"({"model": "m"})"), "input");
  ExpectRefused(responses(R"({"model": "m", "input": [{"role": "user"}], "tools": []})"), "tools");
  ExpectRefused(responses(R"({"model": "m", "input": [{"content": "a"}]})"), "input[0].role");
  ExpectRefused(
      responses(R"({"model": "m", "input": [{"type": "function_call", "role": "user"}]})"),
      "input[0].type");
  ExpectRefused(responses(R"({"model": "m", "input": "a", "max_output_tokens": 0})"),
                "max_output_tokens");
  ExpectRefused(responses(R"({"model": "m", "input": "a", "store": 1})"), "store");
  ExpectRefused(responses(R"({"model": "m", "input": "a", "metadata": {"k": 1}})"), "metadata");
  ExpectRefused(
      responses(R"({"model": "m", "input": "a", "text": {"format": {"type": "json_object"}}})"),
      "text");
}

TEST(OpenAiRequestTest, ErrorParam) {
  EXPECT_EQ(ErrorParam("max_tokens: must be an integer"), "max_tokens");
  EXPECT_EQ(ErrorParam("messages[2].role: is required"), "messages[2].role");
  EXPECT_EQ(ErrorParam("request body: not valid JSON"), std::nullopt);
  EXPECT_EQ(ErrorParam("no colon here"), std::nullopt);
  EXPECT_EQ(ErrorParam(": empty"), std::nullopt);
}

// What the client sees of a refusal of the shared generation path.
std::string Answered(const std::string& message, OpenAiEndpoint endpoint,
                     const std::string& max_tokens_param = "max_tokens") {
  return std::string(
      InOpenAiTerms(absl::InvalidArgumentError(message), endpoint, max_tokens_param).message());
}

TEST(OpenAiRequestTest, RefusalsNameTheParametersTheClientSent) {
  const auto completions = OpenAiEndpoint::kCompletions;
  EXPECT_EQ(Answered("max_new_tokens 9000 exceeds this server's limit of 4096 "
                     "(--max_new_tokens_limit)",
                     completions),
            "max_tokens: 9000 exceeds this server's limit of 4096 (--max_new_tokens_limit)");
  EXPECT_EQ(Answered("max_new_tokens: the prompt (5 tokens) + max_new_tokens (9) exceeds the "
                     "model's max sequence length 8",
                     OpenAiEndpoint::kChatCompletions, "max_completion_tokens"),
            "max_completion_tokens: the prompt (5 tokens) + max_completion_tokens (9) exceeds the "
            "model's max sequence length 8");
  EXPECT_EQ(Answered("max_new_tokens must be at least 1", OpenAiEndpoint::kResponses,
                     "max_output_tokens"),
            "max_output_tokens: must be at least 1");
  EXPECT_EQ(Answered("prompt_tokens: token id 300 is outside the vocabulary", completions),
            "prompt: token id 300 is outside the vocabulary");
  EXPECT_EQ(Answered("prompt_text has 70000 bytes; this server takes at most 65536",
                     OpenAiEndpoint::kChatCompletions),
            "messages: has 70000 bytes; this server takes at most 65536");
  EXPECT_EQ(Answered("prompt is empty: give prompt_text or prompt_tokens", completions),
            "prompt: is empty: give prompt");
  EXPECT_EQ(Answered("stop_strings[2] has 300 bytes", completions), "stop[2]: has 300 bytes");
  EXPECT_EQ(Answered("stop_strings: model m has no tokenizer", completions),
            "stop: model m has no tokenizer");
  EXPECT_EQ(Answered("temperature must be finite and >= 0, got -1", completions),
            "temperature: must be finite and >= 0, got -1");
  EXPECT_EQ(Answered("top_p must be in (0, 1] (1 = off), got 2", completions),
            "top_p: must be in (0, 1] (1 = off), got 2");
  EXPECT_EQ(ErrorParam(Answered("max_new_tokens 9000 exceeds", completions)), "max_tokens");
  // Not a parameter of the request: left as it is.
  EXPECT_EQ(Answered("session_id: empty", completions), "session_id: empty");
  EXPECT_EQ(Answered("top_pp must be set", completions), "top_pp must be set");
  // Other codes are not refusals of a field.
  const absl::Status busy = absl::ResourceExhaustedError("max_new_tokens queue full");
  EXPECT_EQ(InOpenAiTerms(busy, completions, "max_tokens"), busy);
}

TEST(OpenAiRequestTest, TheMaxTokensParameterIsTheOneGiven) {
  const auto parsed = [](OpenAiEndpoint endpoint, const std::string& body) {
    absl::StatusOr<OpenAiGeneration> r = ParseOpenAiGeneration(endpoint, body);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->max_tokens_param : std::string();
  };
  EXPECT_EQ(parsed(OpenAiEndpoint::kCompletions, R"({"model": "m", "prompt": "a"})"), "max_tokens");
  EXPECT_EQ(parsed(OpenAiEndpoint::kChatCompletions,
                   R"({"model": "m", "messages": [{"role": "user", "content": "a"}],
                       "max_completion_tokens": 5})"),
            "max_completion_tokens");
  EXPECT_EQ(parsed(OpenAiEndpoint::kResponses, R"({"model": "m", "input": "a"})"),
            "max_output_tokens");
  EXPECT_EQ(
      parsed(OpenAiEndpoint::kResponses, R"({"model": "m", "input": "a", "max_output_tokens": 5})"),
      "max_output_tokens");
}

}  // namespace
}  // namespace performer::server
