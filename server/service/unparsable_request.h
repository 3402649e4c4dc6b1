// Calls whose request message does not parse: gRPC's callback API answers
// them UNIMPLEMENTED with an empty message before any handler runs (and so
// before any log or metric sees them). This interceptor turns that answer
// into INVALID_ARGUMENT with a message that says what was wrong, and reports
// the call to the RPC observers (the request log and the metrics), like
// every other refused call.
//
// It applies to calls whose one request arrives with the call (unary and
// server-streaming methods, every performer.v1 method and all but one of
// the Open Inference Protocol's). ModelStreamInfer, the one bidirectional
// stream, reads its messages as bytes and parses each itself (gRPC reports a
// stream message that does not parse as the client's half-close): it answers
// one that does not parse with UnparsableRequestStatus and reports it to the
// same observers (inference_service.h).
#pragma once

#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <string_view>
#include <utility>
#include <vector>

#include "server/observer/rpc_observer.h"

namespace performer::server {

// INVALID_ARGUMENT for a request message that does not parse as `type`;
// `what` names the message ("the request message of Generate", "request 2
// of the ModelStreamInfer stream"). The message says what makes protobuf
// refuse bytes, most often a string field that is not UTF-8.
grpc::Status UnparsableRequestStatus(std::string_view what, std::string_view type);

class UnparsableRequestInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `observers` are not owned and must outlive the server.
  explicit UnparsableRequestInterceptorFactory(std::vector<RpcObserver*> observers)
      : observers_(std::move(observers)) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  std::vector<RpcObserver*> observers_;
};

}  // namespace performer::server
