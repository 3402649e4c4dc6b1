#include "server/http/openai_response.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace performer::server {
namespace {

using nlohmann::json;

StreamSummary Summary(FinishReason reason) {
  StreamSummary s;
  s.reason = reason;
  s.prompt_tokens = 12;
  s.generated_tokens = 3;
  s.cached_prompt_tokens = 8;
  return s;
}

StreamChunk Chunk() {
  StreamChunk c;
  c.token_ids = {65, 66, 67};
  c.text = "ABC";
  c.logprobs = {-0.5f, -1.0f, -2.0f};
  return c;
}

OpenAiAnswer Answer(OpenAiEndpoint endpoint, bool logprobs = false) {
  OpenAiAnswer a;
  a.endpoint = endpoint;
  a.id = "cmpl-r1";
  a.model = "m";
  a.created = 1700000000;
  a.logprobs = logprobs;
  return a;
}

TEST(OpenAiResponseTest, CompletionWithUsageAndCachedTokens) {
  const json j = json::parse(CompletionJson(Answer(OpenAiEndpoint::kCompletions, true), "Once ",
                                            Chunk(), Summary(FinishReason::kLength)));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"], "cmpl-r1");
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["choices"][0]["text"], "Once ABC");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"], json({"65", "66", "67"}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"][2], -2.0);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 12);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 15);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
}

TEST(OpenAiResponseTest, ChatCompletionAndStreamedChunks) {
  const OpenAiAnswer chat = Answer(OpenAiEndpoint::kChatCompletions);
  const json whole =
      json::parse(CompletionJson(chat, "", Chunk(), Summary(FinishReason::kStopString)));
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"], json({{"role", "assistant"}, {"content", "ABC"}}));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(whole["choices"][0]["logprobs"].is_null());

  const json first = json::parse(ChunkJson(chat, Chunk(), /*first=*/true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], json({{"role", "assistant"}, {"content", "ABC"}}));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json next = json::parse(ChunkJson(chat, Chunk(), /*first=*/false));
  EXPECT_EQ(next["choices"][0]["delta"], json({{"content", "ABC"}}));
  const json finish = json::parse(FinishChunkJson(chat, Summary(FinishReason::kEos)));
  EXPECT_EQ(finish["choices"][0]["delta"], json::object());
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "stop");
  const json usage = json::parse(UsageChunkJson(chat, Summary(FinishReason::kEos)));
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 15);

  const json text =
      json::parse(ChunkJson(Answer(OpenAiEndpoint::kCompletions), Chunk(), /*first=*/true));
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "ABC");
}

TEST(OpenAiResponseTest, ChatLogprobsCarryTokenBytes) {
  const json j = json::parse(ChunkJson(Answer(OpenAiEndpoint::kChatCompletions, true), Chunk(),
                                       /*first=*/false));
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0]["token"], "65");
  EXPECT_EQ(content[0]["bytes"], json({'6', '5'}));
  EXPECT_EQ(content[1]["logprob"], -1.0);
}

TEST(OpenAiResponseTest, ServerSentEventFraming) {
  EXPECT_EQ(SseEvent("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
}

TEST(OpenAiResponseTest, ErrorsMapToHttpStatusAndOpenAiShape) {
  EXPECT_EQ(HttpStatusOf(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::FailedPreconditionError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::UnauthenticatedError("x")), 401);
  EXPECT_EQ(HttpStatusOf(absl::PermissionDeniedError("x")), 403);
  EXPECT_EQ(HttpStatusOf(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusOf(absl::AlreadyExistsError("x")), 409);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusOf(absl::InternalError("x")), 500);
  const json e = json::parse(ErrorJson(absl::InvalidArgumentError("max_tokens: must be 1+")));
  EXPECT_EQ(e["error"]["message"], "max_tokens: must be 1+");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "max_tokens");
  EXPECT_EQ(e["error"]["code"], "invalid_argument");
  const json auth = json::parse(ErrorJson(absl::UnauthenticatedError("no token")));
  EXPECT_EQ(auth["error"]["type"], "authentication_error");
  EXPECT_TRUE(auth["error"]["param"].is_null());
  const json limited = json::parse(ErrorJson(absl::ResourceExhaustedError("queue full")));
  EXPECT_EQ(limited["error"]["type"], "rate_limit_error");
  const json large = json::parse(ErrorJson(absl::InvalidArgumentError("too big"), 413));
  EXPECT_EQ(large["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace performer::server
