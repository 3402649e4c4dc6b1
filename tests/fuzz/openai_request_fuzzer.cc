// ParseOpenAiGeneration (the HTTP API's request parser) on arbitrary bodies
// for both endpoints, then the default model's chat template on the parsed
// messages: a status and never a crash. An accepted request names a model,
// has a prompt (completions) or messages (chat), at most 4 stop strings, and
// an error names its field where it has one.
#include <cstdlib>
#include <string>

#include "server/http/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto endpoint = (data[0] & 1) != 0 ? performer::server::OpenAiEndpoint::kChatCompletions
                                           : performer::server::OpenAiEndpoint::kCompletions;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  absl::StatusOr<performer::server::OpenAiGeneration> parsed =
      performer::server::ParseOpenAiGeneration(endpoint, body);
  if (!parsed.ok()) {
    if (parsed.status().code() != absl::StatusCode::kInvalidArgument) abort();
    const std::string message(parsed.status().message());
    if (const auto param = performer::server::ErrorParam(message)) {
      if (param->empty() || message.compare(0, param->size(), *param) != 0) abort();
    }
    return 0;
  }
  const performer::v1::GenerateRequest& wire = parsed->wire;
  if (wire.model().empty() || wire.stop_strings_size() > 4) abort();
  if (endpoint == performer::server::OpenAiEndpoint::kCompletions) {
    if (wire.prompt_case() == performer::v1::GenerateRequest::PROMPT_NOT_SET) abort();
    return 0;
  }
  if (parsed->messages.empty()) abort();
  performer::server::ChatTemplate chat;
  chat.roles = {
      {"system", "{content}\n"}, {"user", "Q:\t{content}\n"}, {"assistant", "A:\t{content}\n"}};
  chat.generation_prompt = "A:\t";
  absl::StatusOr<std::string> prompt = chat.Render(parsed->messages);
  if (prompt.ok() && prompt->size() < chat.generation_prompt.size()) abort();
  return 0;
}
