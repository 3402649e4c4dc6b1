// A model folder's chat template (chat_template.json, optional): how a list
// of chat messages becomes the prompt text the model continues.
//   {"system": "{content}\n", "user": "Q:\t{content}\n",
//    "assistant": "A:\t{content}\n", "generation_prompt": "A:\t",
//    "stop": ["\n"]}
// Each role's pattern holds "{content}" exactly once; the prompt is every
// message's pattern with its content in place, in order, then
// generation_prompt. "stop" (optional, at most 4 strings) is added to a chat
// request's stop strings: where the model's turn ends. A role without a
// pattern is refused in requests; unknown keys are an error. "developer"
// messages use the "system" pattern (OpenAI's newer name for it).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace performer::server {

struct ChatMessage {
  std::string role;
  std::string content;
};

struct ChatTemplate {
  std::map<std::string, std::string> roles;  // role -> pattern with {content}
  std::string generation_prompt;
  std::vector<std::string> stop;

  // The prompt text of `messages`; INVALID_ARGUMENT naming the message
  // (messages[i].role) whose role has no pattern.
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages) const;
  // What follows an assistant message's content in a rendered history (its
  // pattern after {content}), less `already`, the text the model generated
  // past its answer (a stop string) when the suffix begins with it: what a
  // continued conversation feeds before its next messages.
  std::string AfterAssistant(const std::string& already) const;
};

// Reads <model_dir>/chat_template.json; nullopt when absent. INVALID_ARGUMENT
// naming the file and key for a malformed one (or one that is not a regular file of at
// most 16 MiB, core/io/bounded_file.h).
absl::StatusOr<std::optional<ChatTemplate>> LoadChatTemplate(const std::string& model_dir);

}  // namespace performer::server
