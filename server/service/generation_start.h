// The one path from a generation request to a submitted engine request that
// every front end shares (performer.v1 and KServe v2 over gRPC, the HTTP
// APIs): model lookup, the caller's permissions, tokenizing, the model's
// defaults, limits, a session brought from a peer, and the overload answer.
// The request vocabulary is performer.v1.GenerateRequest (other protocols
// translate theirs into it); nothing here knows the transport.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "performer/v1/generation.pb.h"
#include "server/engine/request_stream.h"
#include "server/observer/rpc_observer.h"
#include "server/repository/model_repository.h"
#include "server/security/caller.h"
#include "server/security/security_observer.h"
#include "server/security/token_authenticator.h"
#include "server/service/session_peers.h"

namespace performer::server {

// Text or token ids of a oneof, as model tokens. `field` names the text
// field in messages: INVALID_ARGUMENT when the text has more than
// bounds.max_prompt_bytes (checked before tokenizing), the model has no
// tokenizer or the text does not encode.
absl::StatusOr<std::vector<int64_t>> Tokens(const HostedModel& model, const RequestBounds& bounds,
                                            bool has_text, const std::string& text,
                                            const google::protobuf::RepeatedField<int32_t>& ids,
                                            const char* field);

// `prefix` and 16 random hex digits: a request id the server makes ("req-")
// or another id of its own.
std::string RandomId(const char* prefix);

// Where each protocol lists the hosted models, named by the NOT_FOUND of an
// unknown model ("" for a protocol without a listing: none is named).
inline constexpr char kPerformerModelListing[] = "ListModels";
inline constexpr char kOpenAiModelListing[] = "GET /v1/models";

// NOT_FOUND for a model name the repository does not host; `field` names
// the request field, the name is quoted bounded (BoundUserText), and
// `listing` is where the caller's protocol lists the models.
absl::Status UnknownModelError(const char* field, const std::string& name,
                               std::string_view listing);

// The model of a generation request: NOT_FOUND for an unknown name
// (UnknownModelError's `listing`), FAILED_PRECONDITION for a model that
// cannot generate (an encoder).
absl::StatusOr<HostedModel*> GeneratingModel(ModelRepository& repository, const std::string& name,
                                             std::string_view listing);

// Where StartGeneration hands the accepted request's id and stream; the
// listener must be attached before this returns (the engine may produce at
// once).
using AttachGeneration =
    std::function<void(const std::string& request_id, std::shared_ptr<RequestStream> stream)>;

// How a front end's generations start.
struct GenerationStart {
  // A streamed answer: the slow-reader bound (untaken tokens) and the
  // tokens per message (RequestStream's notify_every_tokens). An answer
  // sent whole (unary): both 0, unbounded and handed over once at the end.
  int64_t buffer_tokens = 0;
  int64_t tokens_per_message = 0;
  // Overload also sets the grpc-retry-pushback-ms trailing metadata (not on
  // a stream that carries several requests; gRPC only).
  bool retry_pushback_metadata = true;
  // The bearer tokens the front end authenticates callers with (not owned;
  // null = every caller is anonymous). The caller owns the request and its
  // id.
  const TokenAuthenticator* tokens = nullptr;
  // The highest priority a caller without the "priority" permission may ask
  // for; above it PERMISSION_DENIED.
  int32_t max_priority_unprivileged = 0;
  SecurityObserver* security_observer = nullptr;  // not owned; may be null
  // Where a turn's session is not held here, it is moved from these peers
  // first (not owned; null = none).
  SessionPeers* peers = nullptr;
  // Named by the error for an unknown model (UnknownModelError).
  std::string_view model_listing = kPerformerModelListing;
};

// What the transport knows of the call a request came on.
struct CallFacts {
  // The authenticated caller (anonymous without bearer tokens), or the
  // UNAUTHENTICATED status of a token revoked since the call's gate.
  absl::StatusOr<Caller> caller = Caller{};
  // The session id a proxy routed the call by (gRPC metadata or HTTP header
  // x-session-id); it must equal the request's session_id when both are set.
  std::optional<std::string> routed_session_id;
  // The call's deadline; none = unbounded.
  std::optional<absl::Time> deadline;
};

// Resolves the model, converts `wire` into the engine's request (tokenized,
// the model's generation defaults merged, a default max_new_tokens trimmed to
// what fits) and submits it, attaching its output through `attach`. Fills
// `record`'s model, caller and request id. On failure returns the status to
// answer with: UNAVAILABLE (DrainingError) while the repository drains,
// UNAUTHENTICATED for a revoked token, PERMISSION_DENIED for a priority the
// caller may not ask for, INVALID_ARGUMENT for a routed session id that is
// not the session_id, NOT_FOUND / FAILED_PRECONDITION for the model,
// UNAVAILABLE for a session a peer holds but cannot hand over now,
// INVALID_ARGUMENT from the engine's one validation
// (ValidateGenerationRequest), RESOURCE_EXHAUSTED when the model's queue is
// full, with the engine's retry hint in *retry_after_ms (when not null).
absl::Status StartGeneration(ModelRepository& repository, const GenerationStart& options,
                             const CallFacts& call, const v1::GenerateRequest& wire,
                             RpcRecord& record, const AttachGeneration& attach,
                             int64_t* retry_after_ms);

}  // namespace performer::server
