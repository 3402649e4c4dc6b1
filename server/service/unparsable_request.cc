#include "server/service/unparsable_request.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/interceptor.h>

#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace performer::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class UnparsableRequestInterceptor : public grpc::experimental::Interceptor {
 public:
  UnparsableRequestInterceptor(grpc::experimental::ServerRpcInfo* info,
                               const std::vector<RpcObserver*>& observers)
      : info_(info), observers_(observers), start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    // The request of a unary or server-streaming call is deserialized once,
    // before the handler; a null message here means it did not parse.
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsable_ = true;
    }
    if (unparsable_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const std::string_view full = info_->method();
      const std::string_view method = full.substr(full.rfind('/') + 1);
      status_ = UnparsableRequestStatus(
          absl::StrCat("the request message of ", absl::string_view(method.data(), method.size())),
          "its protobuf type");
      methods->ModifySendStatus(status_);
    }
    // Reported once the call is closed, when it is known whether the client
    // reset it: a call reset before its message arrives has no message
    // either, and that is a cancel, not bad input.
    if (unparsable_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_CLOSE)) {
      const std::string_view full = info_->method();
      Report(full.substr(full.rfind('/') + 1),
             info_->server_context()->IsCancelled()
                 ? grpc::Status(grpc::StatusCode::CANCELLED,
                                "the client cancelled the call before its request arrived")
                 : status_);
    }
    methods->Proceed();
  }

 private:
  void Report(std::string_view method, const grpc::Status& status) {
    RpcRecord record;
    record.method = method;
    record.protocol =
        absl::StartsWith(info_->method(), "/inference.") ? kKServeV2Protocol : kPerformerProtocol;
    record.status =
        absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
    record.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    record.peer = info_->server_context()->peer();
    for (RpcObserver* o : observers_) o->OnRpcStart(method);
    for (RpcObserver* o : observers_) o->OnRpcEnd(record);
  }

  grpc::experimental::ServerRpcInfo* info_;
  const std::vector<RpcObserver*>& observers_;
  const absl::Time start_;
  bool unparsable_ = false;
  grpc::Status status_;  // what the call is answered with
};

}  // namespace

grpc::Status UnparsableRequestStatus(std::string_view what, std::string_view type) {
  return grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      absl::StrCat(absl::string_view(what.data(), what.size()), " does not parse as ",
                   absl::string_view(type.data(), type.size()),
                   ": a field has the wrong wire type or length, or a string field holds bytes "
                   "that are not UTF-8 (protobuf strings must be valid UTF-8; send bytes as "
                   "token ids)"));
}

grpc::experimental::Interceptor* UnparsableRequestInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  using Type = grpc::experimental::ServerRpcInfo::Type;
  if (info->type() != Type::UNARY && info->type() != Type::SERVER_STREAMING) return nullptr;
  return new UnparsableRequestInterceptor(info, observers_);
}

}  // namespace performer::server
