#include "server/repository/chat_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/bounded_file.h"

namespace performer::server {
namespace {

constexpr const char kContent[] = "{content}";
constexpr size_t kMaxTemplateStops = 4;

absl::Status Bad(const std::string& path, const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": \"", key, "\" ", why));
}

bool HasContentOnce(const std::string& pattern) {
  const size_t first = pattern.find(kContent);
  return first != std::string::npos && pattern.find(kContent, first + 1) == std::string::npos;
}

absl::Status ReadStops(const std::string& path, const nlohmann::json& value,
                       std::vector<std::string>& stop) {
  if (!value.is_array() || value.size() > kMaxTemplateStops) {
    return Bad(path, "stop", "must be an array of at most 4 non-empty strings");
  }
  for (const nlohmann::json& s : value) {
    if (!s.is_string() || s.get<std::string>().empty()) {
      return Bad(path, "stop", "must be an array of at most 4 non-empty strings");
    }
    stop.push_back(s.get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages) const {
  std::string prompt;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role == "developer" ? "system" : messages[i].role;
    const auto pattern = roles.find(role);
    if (pattern == roles.end()) {
      return absl::InvalidArgumentError(absl::StrCat("messages[", i,
                                                     "].role: the model's chat template has no \"",
                                                     role, "\" role (it has ", roles.size(), ")"));
    }
    const size_t at = pattern->second.find(kContent);
    absl::StrAppend(&prompt, pattern->second.substr(0, at), messages[i].content,
                    pattern->second.substr(at + sizeof(kContent) - 1));
  }
  prompt += generation_prompt;
  return prompt;
}

std::string ChatTemplate::AfterAssistant(const std::string& already) const {
  const auto pattern = roles.find("assistant");
  if (pattern == roles.end()) return "";
  std::string suffix =
      pattern->second.substr(pattern->second.find(kContent) + sizeof(kContent) - 1);
  if (suffix.compare(0, already.size(), already) == 0) suffix.erase(0, already.size());
  return suffix;
}

absl::StatusOr<std::optional<ChatTemplate>> LoadChatTemplate(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "chat_template.json").string();
  absl::StatusOr<nlohmann::json> parsed = io::ReadJsonFile(path);
  if (parsed.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  ChatTemplate chat;
  for (auto item = parsed->begin(); item != parsed->end(); ++item) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    if (key == "stop") {
      if (absl::Status s = ReadStops(path, value, chat.stop); !s.ok()) return s;
      continue;
    }
    if (key != "system" && key != "user" && key != "assistant" && key != "generation_prompt") {
      return Bad(path, key,
                 "is not a chat template key (system, user, assistant, generation_prompt, stop)");
    }
    if (!value.is_string()) return Bad(path, key, "must be a string");
    if (key == "generation_prompt") {
      chat.generation_prompt = value.get<std::string>();
    } else if (!HasContentOnce(value.get<std::string>())) {
      return Bad(path, key, "must hold {content} exactly once");
    } else {
      chat.roles[key] = value.get<std::string>();
    }
  }
  if (chat.roles.count("user") == 0) return Bad(path, "user", "is missing");
  return chat;
}

}  // namespace performer::server
