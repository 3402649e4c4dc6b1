// The Open Inference Protocol's REST form (KServe v2) on the HTTP listener,
// with Triton's generate extension. Every inference is the gRPC form's:
// the JSON is read into inference.ModelInferRequest and answered from
// inference.ModelInferResponse, through the same translation
// (server/service/open_inference.h) and the same generation path, so that
// the same tensors and parameters give the same answers.
//   GET  /v2/health/live, /v2/health/ready        (no token needed)
//   GET  /v2/models/{m}[/versions/1], /v2/models/{m}[/versions/1]/ready
//   POST /v2/models/{m}[/versions/1]/infer
//   POST /v2/models/{m}[/versions/1]/generate, .../generate_stream (SSE)
// Requests are counted under protocol "kserve_v2" (methods ModelInfer,
// ModelMetadata, ModelReady, generate, generate_stream; the health routes
// are not counted, as gRPC health is not). Errors: {"error": "<message>"}
// with the HTTP status of the failure.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "inference/grpc_service.pb.h"
#include "server/http/http_listener.h"
#include "server/http/openai_service.h"
#include "server/repository/model_repository.h"

namespace performer::server {

// A REST inference request's JSON as the gRPC message (model_name set by
// the caller): id, parameters (a JSON string, integer, number or bool
// each), inputs [{name, datatype, shape, data (flat or nested), parameters}]
// and outputs [{name}]. INVALID_ARGUMENT naming the field otherwise.
absl::StatusOr<inference::ModelInferRequest> InferRequestFromJson(std::string_view body);

// Triton's generate request: {"text_input": ..., "<input>": ..., "parameters":
// {...}, "<parameter>": ...}: every key naming one of the model's inputs is
// that input (one element), "parameters" holds parameters, and any other key
// is a parameter too.
absl::StatusOr<inference::ModelInferRequest> GenerateRequestFromJson(std::string_view body);

// The response message as REST JSON: outputs with their data as JSON values.
std::string InferResponseJson(const inference::ModelInferResponse& response);
// Triton's generate answer: model_name, model_version, each output's value
// (one element: the value; more: an array) and the response parameters.
std::string GenerateResponseJson(const inference::ModelInferResponse& response);

class OpenInferenceRest {
 public:
  OpenInferenceRest(ModelRepository& repository, OpenAiServiceOptions options);

  // True for the routes it serves (/v2/...).
  static bool Serves(std::string_view path);
  void Handle(const HttpRequest& request, const std::shared_ptr<HttpExchange>& exchange);

 private:
  ModelRepository& repository_;
  const OpenAiServiceOptions options_;
};

}  // namespace performer::server
