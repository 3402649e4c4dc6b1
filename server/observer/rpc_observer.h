// What the services (performer.v1.Generation, inference.GRPCInferenceService)
// report about each RPC, for metrics and the request log, without knowing
// either.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/engine/request_stream.h"

namespace performer::server {

// The APIs an RPC may belong to (RpcRecord::protocol): performer.v1, the
// Open Inference Protocol (inference.GRPCInferenceService) and the OpenAI
// API over HTTP (server/http/).
inline constexpr std::string_view kPerformerProtocol = "performer";
inline constexpr std::string_view kKServeV2Protocol = "kserve_v2";
inline constexpr std::string_view kOpenAiProtocol = "openai";

struct RpcRecord {
  std::string_view method;  // "GenerateStream", "Generate", "Embed", "Cancel", ...
  std::string_view protocol = kPerformerProtocol;
  std::string model;       // the resolved model; "" when none applies or it is unknown
  absl::Status status;     // what the client was sent
  double seconds = 0;      // from the call's start to its end
  std::string request_id;  // generation calls
  std::string peer;
  std::string caller;  // the token's name; "" without bearer tokens or when refused
  std::optional<StreamSummary> summary;  // generations that reached an engine
};

class RpcObserver {
 public:
  virtual ~RpcObserver() = default;
  virtual void OnRpcStart(std::string_view method) = 0;
  // Exactly once per started RPC, when it is done.
  virtual void OnRpcEnd(const RpcRecord& record) = 0;
};

}  // namespace performer::server
