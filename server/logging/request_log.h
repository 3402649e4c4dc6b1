// The request log: one line per finished RPC (server/logging/server_log.h's
// LogRequest), fed by the Generation service as an RpcObserver.
#pragma once

#include <string_view>

#include "server/observer/rpc_observer.h"

namespace performer::server {

class RequestLog final : public RpcObserver {
 public:
  void OnRpcStart(std::string_view /*method*/) override {}
  void OnRpcEnd(const RpcRecord& record) override;
};

}  // namespace performer::server
