#include "server/engine/generation_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/decoding/token_ids.h"

namespace performer::server {

absl::Status ValidateSessionId(const std::string& session_id) {
  if (session_id.empty()) return absl::InvalidArgumentError("session_id: empty");
  if (session_id.size() > kMaxSessionIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("session_id has ", session_id.size(), " bytes; at most ", kMaxSessionIdBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequestId(const std::string& request_id, int64_t max_bytes,
                               const char* field) {
  if (static_cast<int64_t>(request_id.size()) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", request_id.size(), " bytes; at most ", max_bytes));
  }
  return absl::OkStatus();
}

absl::Status ValidatePromptText(const std::string& text, const char* field,
                                const RequestBounds& bounds) {
  if (static_cast<int64_t>(text.size()) > bounds.max_prompt_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, " has ", text.size(),
                                                   " bytes; this server takes at most ",
                                                   bounds.max_prompt_bytes));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ValidateSource(const GenerationRequest& r, const RequestLimits& limits) {
  if (!limits.needs_source) {
    if (r.source.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        "source_text / source_tokens: a decoder-only model takes no source");
  }
  if (r.source.empty()) {
    return absl::InvalidArgumentError(
        "source_text / source_tokens: an encoder-decoder model needs a non-empty source");
  }
  if (static_cast<int64_t>(r.source.size()) > limits.max_source_len) {
    return absl::InvalidArgumentError(
        absl::StrCat("source_tokens: the source has ", r.source.size(),
                     " tokens; the encoder's max_seq_len is ", limits.max_source_len));
  }
  return decoding::CheckTokenIds(r.source, limits.source_vocab_size, "source_tokens");
}

// max_new_tokens against the server's bound and what fits after the prompt.
absl::Status ValidateLength(const GenerationRequest& r, const RequestLimits& limits) {
  const int64_t max_new = r.sampling.max_new_tokens;
  if (max_new < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be at least 1 (0 = the model's default), got ", max_new));
  }
  if (max_new > limits.bounds.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens ", max_new,
                                                   " exceeds this server's limit of ",
                                                   limits.bounds.max_new_tokens));
  }
  const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
  // Written so that no sum or difference can overflow, whatever the limits.
  const int64_t room = prompt_len <= limits.max_seq_len ? limits.max_seq_len - prompt_len : 0;
  if (prompt_len > limits.max_seq_len || max_new > room) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens: the prompt (", prompt_len, " tokens) + max_new_tokens (",
                     max_new, ") exceeds the model's max sequence length ", limits.max_seq_len,
                     "; at most ", room, " new tokens fit after this prompt"));
  }
  return absl::OkStatus();
}

absl::Status ValidateStopStrings(const GenerationRequest& r, const RequestLimits& limits) {
  const RequestBounds& bounds = limits.bounds;
  const std::vector<std::string>& stops = r.sampling.stop_strings;
  if (static_cast<int64_t>(stops.size()) > bounds.max_stop_strings) {
    return absl::InvalidArgumentError(absl::StrCat("stop_strings: ", stops.size(),
                                                   " strings; this server takes at most ",
                                                   bounds.max_stop_strings));
  }
  for (size_t i = 0; i < stops.size(); ++i) {
    if (static_cast<int64_t>(stops[i].size()) > bounds.max_stop_string_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("stop_strings[", i, "] has ", stops[i].size(),
                                                     " bytes; this server takes at most ",
                                                     bounds.max_stop_string_bytes));
    }
  }
  if (!stops.empty() && !limits.has_tokenizer) {
    return absl::InvalidArgumentError(absl::StrCat("stop_strings: model ", limits.model_name,
                                                   " has no tokenizer, so it produces no text"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateGenerationRequest(const GenerationRequest& r, const RequestLimits& limits) {
  const RequestBounds& bounds = limits.bounds;
  if (absl::Status s = ValidateRequestId(r.request_id, bounds.max_request_id_bytes); !s.ok()) {
    return s;
  }
  if (r.prompt.empty()) {
    return absl::InvalidArgumentError(
        "prompt is empty: give prompt_text or prompt_tokens (for an encoder-decoder model, or "
        "set the model's decoder_start_token_id)");
  }
  if (absl::Status s = decoding::CheckTokenIds(r.prompt, limits.vocab_size, "prompt_tokens");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateSource(r, limits); !s.ok()) return s;
  if (absl::Status s = ValidateLength(r, limits); !s.ok()) return s;
  // Before the sampling checks, which read every id: the stop tokens are
  // also compared with every generated token.
  if (static_cast<int64_t>(r.sampling.stop_token_ids.size()) > bounds.max_stop_token_ids) {
    return absl::InvalidArgumentError(
        absl::StrCat("stop_token_ids: ", r.sampling.stop_token_ids.size(),
                     " ids; this server takes at most ", bounds.max_stop_token_ids));
  }
  if (absl::Status s = generation::ValidateSamplingParams(r.sampling, limits.vocab_size); !s.ok()) {
    return s;
  }
  if (!r.session_id.empty()) {
    if (absl::Status s = ValidateSessionId(r.session_id); !s.ok()) return s;
  } else if (r.create_session) {
    return absl::InvalidArgumentError("create_session: set without a session_id to create");
  }
  return ValidateStopStrings(r, limits);
}

}  // namespace performer::server
