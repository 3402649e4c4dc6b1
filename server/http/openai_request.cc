#include "server/http/openai_request.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/io/bounded_file.h"
#include "server/logging/user_text.h"

namespace performer::server {
namespace {

using nlohmann::json;

// OpenAI's own bound on stop sequences.
constexpr size_t kMaxOpenAiStops = 4;

absl::Status Bad(std::string_view field, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(absl::string_view(field.data(), field.size()),
                                                 ": ", absl::string_view(why.data(), why.size())));
}

absl::StatusOr<int64_t> Integer(std::string_view field, const json& v, int64_t low, int64_t high) {
  if (!v.is_number_integer()) return Bad(field, "must be an integer");
  const bool above = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(high);
  if (above || v.get<int64_t>() < low || v.get<int64_t>() > high) {
    return Bad(field, absl::StrCat("must be between ", low, " and ", high));
  }
  return v.get<int64_t>();
}

absl::StatusOr<float> Number(std::string_view field, const json& v) {
  if (!v.is_number()) return Bad(field, "must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) {
    return Bad(field, "must be a finite number");
  }
  return static_cast<float>(d);
}

absl::StatusOr<bool> Boolean(std::string_view field, const json& v) {
  if (!v.is_boolean()) return Bad(field, "must be true or false");
  return v.get<bool>();
}

absl::Status ReadStop(const json& v, v1::GenerateRequest& wire) {
  if (v.is_string()) {
    wire.add_stop_strings(v.get<std::string>());
    return absl::OkStatus();
  }
  if (!v.is_array() || v.size() > kMaxOpenAiStops) {
    return Bad("stop", "must be a string or an array of at most 4 strings");
  }
  for (const json& s : v) {
    if (!s.is_string()) return Bad("stop", "must be a string or an array of at most 4 strings");
    wire.add_stop_strings(s.get<std::string>());
  }
  return absl::OkStatus();
}

bool IsTokenArray(const json& v) {
  if (!v.is_array() || v.empty()) return false;
  for (const json& t : v) {
    if (!t.is_number_integer()) return false;
  }
  return true;
}

absl::Status ReadPrompt(const json& v, v1::GenerateRequest& wire) {
  const json* one = &v;
  // A batch of one prompt is that prompt.
  if (v.is_array() && v.size() == 1 && (v[0].is_string() || v[0].is_array())) one = &v[0];
  if (one->is_string()) {
    wire.set_prompt_text(one->get<std::string>());
    return absl::OkStatus();
  }
  if (IsTokenArray(*one)) {
    for (const json& t : *one) {
      absl::StatusOr<int64_t> id = Integer("prompt", t, 0, std::numeric_limits<int32_t>::max());
      if (!id.ok()) return Bad("prompt", "token ids must be integers from 0 to 2147483647");
      wire.mutable_prompt_tokens()->add_ids(static_cast<int32_t>(*id));
    }
    return absl::OkStatus();
  }
  if (v.is_array() && v.size() > 1 && (v[0].is_string() || v[0].is_array())) {
    return Bad("prompt", "a batch of prompts is not supported: send one prompt per request");
  }
  return Bad("prompt", "must be a string or an array of token ids");
}

// One chat message: {"role": ..., "content": string | [{"type": "text",
// "text": ...}] | null, "name": ...}.
absl::Status ReadMessage(size_t i, const json& m, std::vector<ChatMessage>& out) {
  const std::string field = absl::StrCat("messages[", i, "]");
  if (!m.is_object()) return Bad(field, "must be an object with role and content");
  ChatMessage message;
  for (auto item = m.begin(); item != m.end(); ++item) {
    const std::string& key = item.key();
    const json& v = item.value();
    if (key == "role") {
      if (!v.is_string()) return Bad(field + ".role", "must be a string");
      message.role = v.get<std::string>();
    } else if (key == "content") {
      if (v.is_string()) {
        message.content = v.get<std::string>();
      } else if (v.is_array()) {
        for (const json& part : v) {
          const json type = part.is_object() ? part.value("type", json()) : json();
          if ((type != "text" && type != "input_text" && type != "output_text") ||
              !part.contains("text") || !part["text"].is_string()) {
            return Bad(field + ".content",
                       "parts must be {\"type\": \"text\" (or \"input_text\", "
                       "\"output_text\"), \"text\": ...}: only text is supported");
          }
          message.content += part["text"].get<std::string>();
        }
      } else if (!v.is_null()) {
        return Bad(field + ".content", "must be a string or an array of text parts");
      }
    } else if (key == "name" || key == "type" || key == "id" || key == "status") {
      if (!v.is_string()) return Bad(field + "." + key, "must be a string");
      if (key == "type" && v != "message") {
        return Bad(field + ".type", "only \"message\" items are supported");
      }
    } else {
      return Bad(field, absl::StrCat("unknown field \"", BoundUserText(key), "\""));
    }
  }
  if (message.role.empty()) return Bad(field + ".role", "is required");
  out.push_back(std::move(message));
  return absl::OkStatus();
}

absl::Status ReadMessages(const json& v, std::vector<ChatMessage>& out) {
  if (!v.is_array() || v.empty()) return Bad("messages", "must be a non-empty array");
  for (size_t i = 0; i < v.size(); ++i) {
    if (absl::Status s = ReadMessage(i, v[i], out); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The fields both endpoints share, and our extensions. Returns false for a
// key it does not know.
absl::StatusOr<bool> ReadCommon(const std::string& key, const json& v, OpenAiGeneration& out) {
  v1::GenerateRequest& wire = out.wire;
  if (key == "model") {
    if (!v.is_string()) return Bad(key, "must be a string");
    wire.set_model(v.get<std::string>());
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    absl::StatusOr<int64_t> n = Integer(key, v, 1, std::numeric_limits<int32_t>::max());
    if (!n.ok()) return n.status();
    wire.set_max_new_tokens(static_cast<int32_t>(*n));
    out.max_tokens_param = key;
  } else if (key == "temperature" || key == "top_p" || key == "repetition_penalty") {
    absl::StatusOr<float> x = Number(key, v);
    if (!x.ok()) return x.status();
    if (key == "temperature") wire.set_temperature(*x);
    if (key == "top_p") wire.set_top_p(*x);
    if (key == "repetition_penalty") wire.set_repetition_penalty(*x);
  } else if (key == "top_k" || key == "priority") {
    absl::StatusOr<int64_t> n =
        Integer(key, v, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
    if (!n.ok()) return n.status();
    if (key == "top_k") wire.set_top_k(static_cast<int32_t>(*n));
    if (key == "priority") wire.set_priority(static_cast<int32_t>(*n));
  } else if (key == "seed") {
    if (!v.is_number_integer()) return Bad(key, "must be an integer");
    wire.set_seed(v.is_number_unsigned() ? v.get<uint64_t>()
                                         : static_cast<uint64_t>(v.get<int64_t>()));
  } else if (key == "n" || key == "best_of") {
    if (!v.is_number_integer() || v.get<int64_t>() != 1) {
      return Bad(key, "only 1 is supported: send one request per completion");
    }
  } else if (key == "stream" || key == "ignore_eos") {
    absl::StatusOr<bool> b = Boolean(key, v);
    if (!b.ok()) return b.status();
    if (key == "stream") out.stream = *b;
    if (key == "ignore_eos") wire.set_ignore_eos(*b);
  } else if (key == "stream_options") {
    if (!v.is_object()) return Bad(key, "must be an object");
    out.stream_options = true;
    for (auto item = v.begin(); item != v.end(); ++item) {
      if (item.key() != "include_usage") {
        return Bad(key, absl::StrCat("unknown field \"", BoundUserText(item.key()), "\""));
      }
      absl::StatusOr<bool> b = Boolean("stream_options.include_usage", item.value());
      if (!b.ok()) return b.status();
      out.include_usage = *b;
    }
  } else if (key == "stop") {
    if (absl::Status s = ReadStop(v, wire); !s.ok()) return s;
  } else if (key == "user" || key == "request_id") {
    if (!v.is_string()) return Bad(key, "must be a string");
    if (key == "request_id") wire.set_request_id(v.get<std::string>());
  } else if (key == "frequency_penalty" || key == "presence_penalty") {
    absl::StatusOr<float> x = Number(key, v);
    if (!x.ok()) return x.status();
    if (*x != 0) return Bad(key, "is not supported (only 0); use repetition_penalty");
  } else if (key == "logit_bias") {
    if (!v.is_object() || !v.empty()) return Bad(key, "is not supported (only {})");
  } else {
    return false;
  }
  return true;
}

// The Responses API's own fields.
absl::StatusOr<bool> ReadResponsesField(const std::string& key, const json& v,
                                        OpenAiGeneration& out) {
  if (key == "input") {
    if (v.is_string()) {
      out.messages.push_back({"user", v.get<std::string>()});
      return true;
    }
    if (absl::Status s = ReadMessages(v, out.messages); !s.ok()) {
      // ReadMessages names "messages..."; the field here is "input".
      const std::string message(s.message());
      return absl::InvalidArgumentError(
          absl::StrCat("input", message.substr(std::string_view("messages").size())));
    }
    return true;
  }
  if (key == "instructions" || key == "previous_response_id") {
    if (!v.is_string()) return Bad(key, "must be a string");
    (key == "instructions" ? out.instructions : out.previous_response_id) = v.get<std::string>();
    return true;
  }
  if (key == "store") {
    absl::StatusOr<bool> b = Boolean(key, v);
    if (!b.ok()) return b.status();
    out.store = *b;
    return true;
  }
  if (key == "max_output_tokens") {
    absl::StatusOr<int64_t> n = Integer(key, v, 1, std::numeric_limits<int32_t>::max());
    if (!n.ok()) return n.status();
    out.wire.set_max_new_tokens(static_cast<int32_t>(*n));
    out.max_tokens_param = key;
    return true;
  }
  if (key == "metadata") {
    if (!v.is_object() || v.size() > 16) return Bad(key, "must be an object of at most 16 strings");
    for (auto item = v.begin(); item != v.end(); ++item) {
      if (!item.value().is_string()) return Bad(key, "must be an object of at most 16 strings");
    }
    out.metadata_json = v.dump();
    return true;
  }
  if (key == "text") {
    if (v != json({{"format", {{"type", "text"}}}})) {
      return Bad(key, "only {\"format\": {\"type\": \"text\"}} is supported");
    }
    return true;
  }
  if (key == "truncation") {
    if (v != "disabled") return Bad(key, "only \"disabled\" is supported");
    return true;
  }
  return false;
}

absl::StatusOr<bool> ReadEndpointField(OpenAiEndpoint endpoint, const std::string& key,
                                       const json& v, OpenAiGeneration& out) {
  if (endpoint == OpenAiEndpoint::kCompletions) {
    if (key == "echo") {
      absl::StatusOr<bool> b = Boolean(key, v);
      if (!b.ok()) return b.status();
      out.echo = *b;
      return true;
    }
    if (key == "logprobs") {
      absl::StatusOr<int64_t> n = Integer(key, v, 0, 5);
      if (!n.ok()) return n.status();
      if (*n != 0) {
        return Bad(key,
                   "only 0 is supported: the sampled tokens' log-probabilities, "
                   "without alternatives");
      }
      out.logprobs = true;
      return true;
    }
    if (key == "suffix") return Bad(key, "is not supported");
    return false;
  }
  if (endpoint == OpenAiEndpoint::kResponses) return ReadResponsesField(key, v, out);
  if (key == "messages") {
    if (absl::Status s = ReadMessages(v, out.messages); !s.ok()) return s;
    return true;
  }
  if (key == "logprobs") {
    absl::StatusOr<bool> b = Boolean(key, v);
    if (!b.ok()) return b.status();
    out.logprobs = *b;
    return true;
  }
  if (key == "top_logprobs") {
    if (!v.is_number_integer() || v.get<int64_t>() != 0) {
      return Bad(key, "only 0 is supported: the sampled tokens' log-probabilities");
    }
    return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<OpenAiGeneration> ParseOpenAiGeneration(OpenAiEndpoint endpoint,
                                                       std::string_view body) {
  absl::StatusOr<json> parsed = io::ParseBoundedJson(body, "request body");
  if (!parsed.ok()) return parsed.status();
  if (!parsed->is_object()) return Bad("request body", "must be a JSON object");
  OpenAiGeneration out;
  if (endpoint == OpenAiEndpoint::kResponses) out.max_tokens_param = "max_output_tokens";
  for (auto item = parsed->begin(); item != parsed->end(); ++item) {
    const std::string& key = item.key();
    // null is "not given", as OpenAI reads it.
    if (item.value().is_null()) continue;
    if (endpoint == OpenAiEndpoint::kCompletions && key == "prompt") {
      if (absl::Status s = ReadPrompt(item.value(), out.wire); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<bool> known = ReadEndpointField(endpoint, key, item.value(), out);
    if (!known.ok()) return known.status();
    if (!*known) known = ReadCommon(key, item.value(), out);
    if (!known.ok()) return known.status();
    if (!*known) {
      return Bad(BoundUserText(key), "unrecognized request argument");
    }
  }
  if (out.wire.model().empty()) return Bad("model", "is required");
  if (endpoint == OpenAiEndpoint::kCompletions &&
      out.wire.prompt_case() == v1::GenerateRequest::PROMPT_NOT_SET) {
    return Bad("prompt", "is required");
  }
  if (endpoint == OpenAiEndpoint::kChatCompletions && out.messages.empty()) {
    return Bad("messages", "is required");
  }
  if (endpoint == OpenAiEndpoint::kResponses && out.messages.empty()) {
    return Bad("input", "is required");
  }
  if (!out.instructions.empty())
    out.messages.insert(out.messages.begin(), ChatMessage{"system", out.instructions});
  if (out.stream_options && !out.stream) {
    return Bad("stream_options", "is only allowed when stream is true");
  }
  if (out.echo && out.wire.prompt_case() != v1::GenerateRequest::kPromptText) {
    return Bad("echo", "is supported for a text prompt only");
  }
  out.wire.set_return_logprobs(out.logprobs);
  return out;
}

std::optional<std::string> ErrorParam(std::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == std::string_view::npos || colon == 0 || colon > 64) return std::nullopt;
  for (const char c : message.substr(0, colon)) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '[' &&
        c != ']') {
      return std::nullopt;
    }
  }
  return std::string(message.substr(0, colon));
}

namespace {

bool IsWordChar(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Every occurrence of the field name `from` in `text` that is a word of its
// own (not part of a longer name or of a --flag) becomes `to`.
std::string RenameWord(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  size_t done = 0;
  for (size_t at = text.find(from); at != std::string_view::npos; at = text.find(from, at + 1)) {
    const size_t end = at + from.size();
    const bool starts = at == 0 || (!IsWordChar(text[at - 1]) && text[at - 1] != '-');
    const bool ends = end == text.size() || !IsWordChar(text[end]);
    if (!starts || !ends) continue;
    out.append(text.substr(done, at - done)).append(to);
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

}  // namespace

absl::Status InOpenAiTerms(const absl::Status& status, OpenAiEndpoint endpoint,
                           std::string_view max_tokens_param) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  const std::string_view prompt = endpoint == OpenAiEndpoint::kCompletions       ? "prompt"
                                  : endpoint == OpenAiEndpoint::kChatCompletions ? "messages"
                                                                                 : "input";
  const std::pair<std::string_view, std::string_view> renames[] = {
      {"prompt_text or prompt_tokens", prompt}, {"prompt_text", prompt},  {"prompt_tokens", prompt},
      {"max_new_tokens", max_tokens_param},     {"stop_strings", "stop"},
  };
  std::string message(status.message());
  for (const auto& [from, to] : renames) message = RenameWord(message, from, to);
  // "max_tokens 9000 exceeds ..." / "stop[2] has ..." -> "max_tokens: ...".
  const std::string_view params[] = {max_tokens_param,     prompt,     "stop",      "model",
                                     "temperature",        "top_p",    "top_k",     "seed",
                                     "repetition_penalty", "priority", "request_id"};
  for (const std::string_view param : params) {
    if (message.compare(0, param.size(), param) != 0 ||
        (message.size() > param.size() && IsWordChar(message[param.size()]))) {
      continue;
    }
    size_t end = param.size();
    if (end < message.size() && message[end] == '[') {
      const size_t close = message.find(']', end);
      if (close == std::string::npos) break;
      end = close + 1;
    }
    if (end < message.size() && message[end] == ' ') {
      message.insert(end, ":");
    }
    break;
  }
  return absl::Status(status.code(), message);
}

}  // namespace performer::server
