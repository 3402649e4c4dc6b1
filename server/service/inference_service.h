// inference.GRPCInferenceService (the Open Inference Protocol, KServe v2,
// with Triton's ModelStreamInfer) on gRPC's callback API, beside
// performer.v1.Generation on the same server. Every inference is a
// generation on the path Generate takes (generation_rpc.h): the same model
// lookup, tokenizers, validation, limits, overload answer and observers
// (metrics count it under protocol "kserve_v2"). The translation between the
// two protocols is open_inference.h's.
//
// ModelStreamInfer is decoupled: a client may send any number of requests on
// one stream; each is answered by one response per piece of generated text
// (the text and token ids produced since the previous response) with the
// parameter triton_final_response false, then one final response with
// triton_final_response true, finish_reason and the token counts (it may
// carry the last piece). A request that fails is answered by one response
// whose error_message is "<gRPC code name>: <message>" and whose
// infer_response carries its id; the stream stays open. At most
// kMaxStreamRequests requests of one stream run at a time; the server reads
// the next request once one of them has finished. A message that does not
// parse as a ModelInferRequest ends the stream: nothing after it is read,
// the requests before it are answered, then the call ends INVALID_ARGUMENT
// naming the message's place on the stream; the observers count it as one
// refused request (as unparsable_request.h does for the other methods).
#pragma once

#include <grpcpp/support/byte_buffer.h>

#include <atomic>

#include "absl/time/time.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/repository/model_repository.h"
#include "server/service/generation_service.h"

namespace performer::server {

namespace inference_service_internal {
using Grpc = inference::GRPCInferenceService;
// The service on gRPC's callback API, with ModelStreamInfer's messages as
// bytes both ways: gRPC reports a typed stream message that does not parse
// exactly as it reports the client's half-close, so the stream's reactor
// parses each request itself.
using CallbackService = Grpc::WithCallbackMethod_ServerLive<Grpc::WithCallbackMethod_ServerReady<
    Grpc::WithCallbackMethod_ModelReady<Grpc::WithCallbackMethod_ServerMetadata<
        Grpc::WithCallbackMethod_ModelMetadata<Grpc::WithCallbackMethod_ModelInfer<
            Grpc::WithRawCallbackMethod_ModelStreamInfer<Grpc::Service>>>>>>>;
}  // namespace inference_service_internal

class InferenceService final : public inference_service_internal::CallbackService {
 public:
  static constexpr int kMaxStreamRequests = 64;

  // `liveness_stall`: an engine with work that completes no step for this
  // long makes ServerLive false (as the "liveness" health name).
  InferenceService(ModelRepository& repository, ServiceOptions options,
                   absl::Duration liveness_stall);

  // New inferences get UNAVAILABLE and readiness turns false from now on.

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  // Reads inference::ModelInferRequest and writes
  // inference::ModelStreamInferResponse, serialized.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;

 private:
  class UnaryInfer;
  class StreamInfer;

  // Whether `model` serves inferences now: a generating model whose engine
  // is neither draining nor stalled.
  bool ModelServes(const HostedModel& model) const;

  ModelRepository& repository_;
  const ServiceOptions options_;
  const absl::Duration liveness_stall_;
};

}  // namespace performer::server
