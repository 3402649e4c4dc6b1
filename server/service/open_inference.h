// Text generation in the Open Inference Protocol's terms (KServe v2 /
// Triton), as pure translations between its messages and performer.v1's,
// so that an inference request takes the same path through validation,
// limits and the engine as a Generate call.
//
// A generating model's tensors (ModelMetadata):
//   inputs   text_input  BYTES [1]   the prompt (models with a tokenizer)
//            input_ids   INT32 [-1]  the prompt as token ids
//            source_text BYTES [1]   encoder input (encoder-decoder models)
//            source_ids  INT32 [-1]
//   outputs  text_output BYTES [1]   the generated text (models with a tokenizer)
//            output_ids  INT32 [-1]  the generated token ids
// Sampling settings are request parameters (kInferParameters); a response
// carries parameters finish_reason, prompt_tokens, generated_tokens and, on
// ModelStreamInfer, triton_final_response.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "inference/grpc_service.pb.h"
#include "performer/v1/generation.pb.h"
#include "server/engine/request_stream.h"
#include "server/repository/model_repository.h"

namespace performer::server {

// The only version of every model.
inline constexpr char kInferModelVersion[] = "1";

// The request parameters understood, with the kinds of value each takes.
inline constexpr char kInferParameters[] =
    "max_tokens (int), temperature (number), top_p (number), top_k (int), "
    "repetition_penalty (number), seed (int >= 0), stop (string), ignore_eos (bool), "
    "priority (int), session_id (string), create_session (bool), "
    "triton_enable_empty_final_response (bool)";

// What the answer to one inference request needs besides the generation.
struct InferReply {
  std::string id;          // the request's id, echoed
  std::string model_name;  // the model that generates
  bool raw = false;        // outputs in raw_output_contents (the request used raw inputs)
  bool text_output = false;
  bool output_ids = false;
};

struct InferCall {
  v1::GenerateRequest generate;  // what the engine path takes
  InferReply reply;
};

// NOT_FOUND unless `version` is empty or the model's only version.
absl::Status CheckModelVersion(const HostedModel& model, const std::string& version);

// A request's id is echoed in every response (and logged), so it has the
// bound of performer.v1's request_id (--max_request_id_bytes; checked with
// ValidateRequestId). The id an answer may echo: the id, or "" for one over
// the bound.
std::string EchoedInferId(const std::string& id, const RequestBounds& bounds);

// The request as a generation of `model`: its inputs decoded (contents or
// raw_input_contents), its parameters typed, its requested outputs checked.
// INVALID_ARGUMENT naming the input, output or parameter at fault.
absl::StatusOr<InferCall> ToGenerateRequest(const inference::ModelInferRequest& request,
                                            const HostedModel& model);

// Sets `response`'s id, model, outputs (from `generated`: its text and token
// ids) and, when `summary` is given, finish_reason and token counts.
void FillInferResponse(const InferReply& reply, const v1::GenerateResponse& generated,
                       const StreamSummary* summary, inference::ModelInferResponse* response);

// The model's tensors and platform.
void FillModelMetadata(const HostedModel& model, inference::ModelMetadataResponse* metadata);

// A status from the shared generation path in this protocol's words: a
// message about a performer.v1 field (max_new_tokens, prompt_text,
// stop_strings, ...) first names the parameter or input it came from.
absl::Status InProtocolTerms(const absl::Status& status);

}  // namespace performer::server
