// Calls whose request message does not parse: gRPC's callback API answers
// them UNIMPLEMENTED with an empty message before any handler runs (and so
// before any log or metric sees them). This interceptor turns that answer
// into INVALID_ARGUMENT with a message that says what was wrong, and reports
// the call to the RPC observers (the request log and the metrics), like
// every other refused call.
//
// It applies to calls whose one request arrives with the call (unary and
// server-streaming methods, every performer.v1 method and all but one of
// the Open Inference Protocol's); a streaming request's messages are read
// by the service's own reactor.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <utility>
#include <vector>

#include "server/observer/rpc_observer.h"

namespace performer::server {

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
