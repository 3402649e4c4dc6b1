#include "server/service/generation_start.h"

#include <algorithm>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "server/engine/draining.h"
#include "server/logging/user_text.h"

namespace performer::server {
namespace {

// The wire request as the engine's request: tokenized, with the model's
// defaults merged in. The engine validates it (Engine::Submit) against the
// same `bounds` (the repository's, which its engines were given).
absl::StatusOr<GenerationRequest> ToEngineRequest(const v1::GenerateRequest& wire,
                                                  const HostedModel& model,
                                                  const RequestBounds& bounds,
                                                  const CallFacts& call) {
  GenerationRequest r;
  r.request_id = wire.request_id().empty() ? RandomId("req-") : wire.request_id();
  absl::StatusOr<std::vector<int64_t>> prompt =
      Tokens(model, bounds, wire.prompt_case() == v1::GenerateRequest::kPromptText,
             wire.prompt_text(), wire.prompt_tokens().ids(), "prompt_text");
  if (!prompt.ok()) return prompt.status();
  r.prompt = std::move(*prompt);
  absl::StatusOr<std::vector<int64_t>> source =
      Tokens(model, bounds, wire.source_case() == v1::GenerateRequest::kSourceText,
             wire.source_text(), wire.source_tokens().ids(), "source_text");
  if (!source.ok()) return source.status();
  r.source = std::move(*source);
  const GenerationConfig& defaults = model.generation;
  if (model.kind == ModelKind::kEncoderDecoder && r.prompt.empty()) {
    if (defaults.decoder_start_token_id.has_value()) {
      r.prompt = {*defaults.decoder_start_token_id};
    } else if (defaults.bos_token_id.has_value()) {
      r.prompt = {*defaults.bos_token_id};
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt_tokens: empty, and model ", model.name,
          " has no decoder_start_token_id in generation_config.json to start the decoder with"));
    }
  }

  generation::SamplingOverrides overrides;
  if (wire.max_new_tokens() != 0) overrides.max_new_tokens = wire.max_new_tokens();
  if (wire.has_temperature()) overrides.temperature = wire.temperature();
  if (wire.top_k() != 0) overrides.top_k = wire.top_k();
  if (wire.has_top_p()) overrides.top_p = wire.top_p();
  if (wire.has_repetition_penalty()) overrides.repetition_penalty = wire.repetition_penalty();
  if (wire.has_seed()) overrides.seed = wire.seed();
  overrides.stop_token_ids.assign(wire.stop_token_ids().begin(), wire.stop_token_ids().end());
  overrides.stop_strings.assign(wire.stop_strings().begin(), wire.stop_strings().end());
  overrides.ignore_eos = wire.ignore_eos();
  // A default max_new_tokens is trimmed to what fits after the prompt and
  // under the server's limit; an explicit one that does not fit is refused
  // by the engine's validation.
  const int64_t room = model.max_sequence_length - static_cast<int64_t>(r.prompt.size());
  r.sampling = generation::ResolveSamplingParams(defaults.SamplingDefaults(), overrides,
                                                 std::min(bounds.max_new_tokens, room));
  r.return_logprobs = wire.return_logprobs();
  r.priority = wire.priority();
  r.session_id = wire.session_id();
  r.create_session = wire.create_session();
  if (call.deadline.has_value()) r.deadline = *call.deadline;
  return r;
}

// The x-session-id a proxy routed the call by must name the request's
// session where both are given.
absl::Status CheckSessionMetadata(const CallFacts& call, const v1::GenerateRequest& wire) {
  if (!call.routed_session_id.has_value() || wire.session_id().empty()) return absl::OkStatus();
  const std::string& routed = *call.routed_session_id;
  if (routed == wire.session_id()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "x-session-id metadata \"", BoundUserText(routed), "\" is not the request's session_id \"",
      BoundUserText(wire.session_id()), "\": a proxy routes the turn by the metadata"));
}

// What asking the peers for a session left for the engine's answer to a
// miss: the peers that could not be asked, and whether one of them did not
// answer in time (and so may hold it).
struct PeersMiss {
  std::string note;
  bool maybe_held = false;
};

// A turn of a session this replica does not hold: the peers are asked to
// move it here first. A miss at the peers is not an error here: the engine
// then looks in the spill folder and answers the miss itself, with `miss`.
absl::Status BringSession(const GenerationStart& options, HostedModel& model,
                          const GenerationRequest& r, PeersMiss* miss) {
  if (r.session_id.empty() || r.create_session || options.peers == nullptr ||
      !options.peers->enabled() || !ValidateSessionId(r.session_id).ok() ||
      model.engine->HoldsSession(r.session_id, r.owner)) {
    return absl::OkStatus();
  }
  absl::Status fetched = options.peers->Fetch(*model.engine, r.session_id, r.owner);
  if (absl::IsNotFound(fetched) || absl::IsDeadlineExceeded(fetched)) {
    miss->note = std::string(fetched.message());
    miss->maybe_held = absl::IsDeadlineExceeded(fetched);
    return absl::OkStatus();
  }
  if (absl::IsUnavailable(fetched)) model.engine->CountSessionPeerUnavailable();
  return fetched;
}

// The engine's answer to a turn, with what the peers left: a miss names the
// peers that could not be asked, and becomes UNAVAILABLE (retry) when one
// that may hold the session did not answer in time, since the session is
// then not known to be lost.
absl::Status AnswerMiss(absl::Status submitted, const PeersMiss& miss,
                        const std::string& session_id, const std::string& model) {
  if (!absl::IsNotFound(submitted) || miss.note.empty()) return submitted;
  if (!miss.maybe_held) {
    return absl::NotFoundError(absl::StrCat(submitted.message(), " (", miss.note, ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "session ", session_id, " of model ", model,
      " is not here or in the spill folder, and a peer that may hold it did not answer in time (",
      miss.note, "); retry the turn"));
}

}  // namespace

std::string RandomId(const char* prefix) {
  static absl::Mutex mu(absl::kConstInit);
  static absl::BitGen* gen = new absl::BitGen();
  absl::MutexLock lock(&mu);
  return absl::StrFormat("%s%016x", prefix, absl::Uniform<uint64_t>(*gen));
}

absl::StatusOr<std::vector<int64_t>> Tokens(const HostedModel& model, const RequestBounds& bounds,
                                            bool has_text, const std::string& text,
                                            const google::protobuf::RepeatedField<int32_t>& ids,
                                            const char* field) {
  if (has_text) {
    if (absl::Status s = ValidatePromptText(text, field, bounds); !s.ok()) return s;
    if (model.tokenizer == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": model ", model.name,
          " has no tokenizer; send token ids instead (its ModelInfo.tokenizer is empty)"));
    }
    absl::StatusOr<std::vector<int32_t>> encoded = model.tokenizer->Encode(text);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", encoded.status().message()));
    }
    return std::vector<int64_t>(encoded->begin(), encoded->end());
  }
  return std::vector<int64_t>(ids.begin(), ids.end());
}

absl::Status UnknownModelError(const char* field, const std::string& name,
                               std::string_view listing) {
  return absl::NotFoundError(
      absl::StrCat(field, ": no model named \"", BoundUserText(name), "\" is hosted here",
                   listing.empty() ? "" : " (see " + std::string(listing) + ")"));
}

absl::StatusOr<HostedModel*> GeneratingModel(ModelRepository& repository, const std::string& name,
                                             std::string_view listing) {
  HostedModel* model = repository.Find(name);
  if (model == nullptr) {
    return UnknownModelError("model", name, listing);
  }
  if (model->engine == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model ", model->name, " is a bidirectional encoder: it supports Embed, not generation"));
  }
  return model;
}

absl::Status StartGeneration(ModelRepository& repository, const GenerationStart& options,
                             const CallFacts& call, const v1::GenerateRequest& wire,
                             RpcRecord& record, const AttachGeneration& attach,
                             int64_t* retry_after_ms) {
  record.request_id = wire.request_id();
  if (repository.draining()) return DrainingError();
  if (!call.caller.ok()) return call.caller.status();
  const Caller& caller = *call.caller;
  record.caller = caller.name;
  if (wire.priority() > options.max_priority_unprivileged && !caller.Has(Permission::kPriority)) {
    if (options.security_observer != nullptr) {
      options.security_observer->OnPermissionDenied(caller.name, Permission::kPriority);
    }
    return absl::PermissionDeniedError(
        absl::StrCat("priority: ", wire.priority(), " is above ", options.max_priority_unprivileged,
                     ", the highest a caller without the \"priority\" permission may ask for"));
  }
  if (absl::Status s = CheckSessionMetadata(call, wire); !s.ok()) return s;
  absl::StatusOr<HostedModel*> model =
      GeneratingModel(repository, wire.model(), options.model_listing);
  if (!model.ok()) return model.status();
  record.model = (*model)->name;
  absl::StatusOr<GenerationRequest> request =
      ToEngineRequest(wire, **model, repository.request_bounds(), call);
  if (!request.ok()) return request.status();
  request->max_buffered_tokens = options.buffer_tokens;
  request->owner = caller.name;
  record.request_id = request->request_id;
  PeersMiss peers_miss;
  if (absl::Status s = BringSession(options, **model, *request, &peers_miss); !s.ok()) return s;
  const std::string session_id = request->session_id;
  auto stream = std::make_shared<RequestStream>(options.buffer_tokens, options.tokens_per_message);
  // The listener is attached before the engine can produce anything.
  attach(request->request_id, stream);
  absl::Status submitted = (*model)->engine->Submit(std::move(*request), stream);
  if (absl::IsResourceExhausted(submitted)) {
    const int64_t ms = absl::ToInt64Milliseconds((*model)->engine->RetryHint());
    if (retry_after_ms != nullptr) *retry_after_ms = ms;
    submitted = absl::ResourceExhaustedError(
        absl::StrCat(submitted.message(), " (suggested retry after ", ms, " ms)"));
  }
  return AnswerMiss(std::move(submitted), peers_miss, session_id, (*model)->name);
}

}  // namespace performer::server
