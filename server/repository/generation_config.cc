#include "server/repository/generation_config.h"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/bounded_file.h"

namespace performer::server {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& path, const std::string& key, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": \"", key, "\" ", why));
}

std::string ConfigPath(const std::string& model_dir) {
  return (std::filesystem::path(model_dir) / "generation_config.json").string();
}

}  // namespace

generation::SamplingParams GenerationConfig::SamplingDefaults() const {
  generation::SamplingParams p;
  p.max_new_tokens = max_new_tokens;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.repetition_penalty = repetition_penalty;
  p.eos_token_id = eos_token_id;
  return p;
}

absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& model_dir) {
  GenerationConfig config;
  const std::string path = ConfigPath(model_dir);
  absl::StatusOr<json> parsed = io::ReadJsonFile(path);
  if (parsed.status().code() == absl::StatusCode::kNotFound) return config;
  if (!parsed.ok()) return parsed.status();
  const json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  for (auto item = j.begin(); item != j.end(); ++item) {
    // Named, not structured bindings: the lambdas below capture them.
    const std::string& key = item.key();
    const json& value = item.value();
    auto token_id = [&](std::optional<int64_t>& out) -> absl::Status {
      if (value.is_null()) return absl::OkStatus();
      if (!value.is_number_integer() || value.get<int64_t>() < 0) {
        return Bad(path, key, "must be a non-negative integer token id or null");
      }
      out = value.get<int64_t>();
      return absl::OkStatus();
    };
    auto number = [&](float& out, bool positive) -> absl::Status {
      // Converted to float: larger values would not be finite.
      if (!value.is_number() || (positive && value.get<double>() <= 0) || value.get<double>() < 0 ||
          value.get<double>() > std::numeric_limits<float>::max()) {
        return Bad(path, key,
                   positive ? "must be a positive number (at most 3.4e38)"
                            : "must be a number >= 0 (at most 3.4e38)");
      }
      out = value.get<float>();
      return absl::OkStatus();
    };
    absl::Status s;
    if (key == "bos_token_id") {
      s = token_id(config.bos_token_id);
    } else if (key == "eos_token_id") {
      s = token_id(config.eos_token_id);
    } else if (key == "pad_token_id") {
      s = token_id(config.pad_token_id);
    } else if (key == "decoder_start_token_id") {
      s = token_id(config.decoder_start_token_id);
    } else if (key == "max_new_tokens" || key == "top_k") {
      if (!value.is_number_integer() || value.get<int64_t>() < (key == "top_k" ? 0 : 1)) {
        s = Bad(path, key, key == "top_k" ? "must be an integer >= 0" : "must be an integer >= 1");
      } else {
        (key == "top_k" ? config.top_k : config.max_new_tokens) = value.get<int64_t>();
      }
    } else if (key == "temperature") {
      s = number(config.temperature, false);
    } else if (key == "top_p") {
      s = number(config.top_p, true);
      if (s.ok() && config.top_p > 1) s = Bad(path, key, "must be in (0, 1]");
    } else if (key == "repetition_penalty") {
      s = number(config.repetition_penalty, true);
    } else {
      s = Bad(path, key, "is not a known key");
    }
    if (!s.ok()) return s;
  }
  return config;
}

absl::Status ValidateGenerationConfig(const GenerationConfig& config, int64_t vocab_size,
                                      const std::string& model_dir) {
  const std::pair<const char*, const std::optional<int64_t>*> ids[] = {
      {"bos_token_id", &config.bos_token_id},
      {"eos_token_id", &config.eos_token_id},
      {"pad_token_id", &config.pad_token_id},
      {"decoder_start_token_id", &config.decoder_start_token_id}};
  for (const auto& [key, id] : ids) {
    if (id->has_value() && (**id < 0 || **id >= vocab_size)) {
      return Bad(ConfigPath(model_dir), key,
                 absl::StrCat("is ", **id, ", outside the model's vocabulary of ", vocab_size,
                              " tokens [0, ", vocab_size, ")"));
    }
  }
  if (config.top_k > vocab_size) {
    return Bad(ConfigPath(model_dir), "top_k",
               absl::StrCat("is ", config.top_k, ", more than the model's vocabulary of ",
                            vocab_size, " tokens"));
  }
  return absl::OkStatus();
}

}  // namespace performer::server
