// What every gRPC front end of the engine shares (performer.v1.Generation and
// inference.GRPCInferenceService): the shared generation path
// (generation_start.h) started from a gRPC call; the record each RPC reports
// to the observers; and the link through which an engine thread hands a
// reactor its tokens.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "performer/v1/generation.pb.h"
#include "server/engine/request_stream.h"
#include "server/observer/rpc_observer.h"
#include "server/repository/model_repository.h"
#include "server/security/security_observer.h"
#include "server/security/token_authenticator.h"
#include "server/service/generation_start.h"
#include "server/service/session_peers.h"

namespace performer::server {

// absl and gRPC share the canonical code numbers.
grpc::Status ToGrpc(const absl::Status& status);
absl::Status FromGrpc(const grpc::Status& status);

// The reason a cancelled RPC gives the engine: kDeadline when the call's
// deadline has (nearly) passed, kCancelled otherwise.
FinishReason CancelReason(const grpc::CallbackServerContext* context);
// What the client of a cancelled RPC sees, whatever the server sends.
grpc::Status CancelledStatus(const grpc::CallbackServerContext* context);

v1::FinishReason ToWire(FinishReason reason);

// Appends a chunk's tokens, text and log-probabilities to `response` (and
// sets its request id).
void FillChunk(const std::string& request_id, const StreamChunk& chunk,
               v1::GenerateResponse* response);
// Sets the finish reason, usage and timings of a finished request.
void FillSummary(const StreamSummary& summary, v1::GenerateResponse* response);

// A finished request that ended with cancel or deadline still sends its
// last message (finish_reason) before the status; other errors drop it.
bool SendsFinalMessage(const StreamSummary& summary);

// One RPC's (or, on a stream carrying many requests, one request's) record
// for the observers (metrics, request log): started on construction,
// reported exactly once by End() or the destructor.
class RpcScope {
 public:
  RpcScope(const std::vector<RpcObserver*>& observers, std::string_view method,
           std::string_view protocol, const grpc::CallbackServerContext* context);
  RpcScope(const RpcScope&) = delete;
  RpcScope& operator=(const RpcScope&) = delete;
  ~RpcScope() { End(sent_); }

  RpcRecord& record() { return record_; }
  // Notes the status the RPC is finished with and returns it.
  const grpc::Status& Sent(const grpc::Status& status) {
    sent_ = status;
    return sent_;
  }
  void End(const grpc::Status& status);

 private:
  const std::vector<RpcObserver*>& observers_;
  const grpc::CallbackServerContext* context_;
  const absl::Time start_;
  RpcRecord record_;
  grpc::Status sent_;
  bool ended_ = false;
};

// Finishes a unary RPC answered inline; `scope` reports it when it goes out
// of scope.
grpc::ServerUnaryReactor* AnswerNow(grpc::CallbackServerContext* context, RpcScope& scope,
                                    const grpc::Status& status);

// The lock of one reactor's state, for clang's thread-safety analysis like
// any mutex. It must be recursive: the reactor calls gRPC's StartWrite,
// StartRead and Finish with it held, and gRPC may run the reaction they
// complete (OnWriteDone, OnReadDone, OnDone's callers) inline, on the same
// thread, inside that call; the reaction takes the lock again.
class ABSL_LOCKABLE ReactorMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // For code the analysis cannot follow: a RequestStream listener, which
  // ReactorGuard::Listener runs with the lock held.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::recursive_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE ReactorLock {
 public:
  explicit ReactorLock(ReactorMutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.Lock(); }
  ~ReactorLock() ABSL_UNLOCK_FUNCTION() { mu_.Unlock(); }
  ReactorLock(const ReactorLock&) = delete;
  ReactorLock& operator=(const ReactorLock&) = delete;

 private:
  ReactorMutex& mu_;
};

// The engine thread notifies a reactor through its RequestStreams'
// listeners while gRPC calls its reactions. One ReactorMutex per reactor
// orders the two, and `alive` keeps a late listener call away from a
// deleted reactor.
class ReactorGuard {
 public:
  ReactorGuard() : guard_(std::make_shared<Guard>()) {}
  ReactorMutex& mu() const ABSL_LOCK_RETURNED(guard_->mu) { return guard_->mu; }
  // A RequestStream listener that has `on_data` run under mu(), only while
  // the reactor lives, on the process's write threads (write_threads.h),
  // never on the appending thread.
  std::function<void()> Listener(std::function<void()> on_data) const;
  // From OnDone, before the reactor is deleted.
  void Retire();

 private:
  struct Guard {
    ReactorMutex mu;
    bool alive ABSL_GUARDED_BY(mu) = true;
    std::atomic<bool> pump_posted{false};  // a pump waits on the write threads
  };
  std::shared_ptr<Guard> guard_;
};

// A reactor serving one generation: its guard, its engine stream and its
// RPC record.
class EngineLink {
 public:
  EngineLink(grpc::CallbackServerContext* context, const std::vector<RpcObserver*>& observers,
             std::string_view method, std::string_view protocol)
      : context_(context), scope_(observers, method, protocol, context) {}

  ReactorMutex& mu() const ABSL_LOCK_RETURNED(guard_.mu()) { return guard_.mu(); }
  RequestStream& stream() { return *stream_; }
  RpcScope& scope() { return scope_; }
  const grpc::CallbackServerContext* context() const { return context_; }

  // `on_data` runs under mu(), only while the reactor lives.
  void Attach(std::shared_ptr<RequestStream> stream, std::function<void()> on_data);
  // The RPC was cancelled (or its client went away): the engine ends the
  // request within a step.
  void CancelFromRpc() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu()) {
    if (stream_) stream_->RequestCancel(CancelReason(context_));
  }
  // From OnDone, before the reactor is deleted.
  void Retire() { guard_.Retire(); }

 private:
  grpc::CallbackServerContext* context_;
  ReactorGuard guard_;
  std::shared_ptr<RequestStream> stream_;
  // Ends (reports) when the reactor is deleted, after OnDone.
  RpcScope scope_;
};

// StartGeneration (generation_start.h) for a gRPC call: the caller from the
// call's token, x-session-id from its metadata, its deadline; overload also
// sets the grpc-retry-pushback-ms trailing metadata when
// options.retry_pushback_metadata.
grpc::Status StartGeneration(ModelRepository& repository, const GenerationStart& options,
                             grpc::CallbackServerContext* context, const v1::GenerateRequest& wire,
                             RpcRecord& record, const AttachGeneration& attach);

// A unary generation: collects the whole output into a GenerateResponse,
// then answers once. Complete() may turn the collected response into the
// RPC's own response message.
class UnaryGenerator : public grpc::ServerUnaryReactor {
 public:
  // `response` receives the output; nullptr collects into an own message
  // (collected()).
  UnaryGenerator(grpc::CallbackServerContext* context, const std::vector<RpcObserver*>& observers,
                 std::string_view method, std::string_view protocol,
                 v1::GenerateResponse* response);

  RpcRecord& record() { return link_.scope().record(); }
  // Finishes at once (a refused request).
  void FinishNow(const grpc::Status& status);
  // Before the engine can produce (StartGeneration's attach).
  void Attach(const std::string& request_id, std::shared_ptr<RequestStream> stream);
  // Starts the generation through StartGeneration; returns its status (the
  // caller finishes a refused request, FinishNow).
  grpc::Status Start(ModelRepository& repository, const GenerationStart& options,
                     grpc::CallbackServerContext* context, const v1::GenerateRequest& wire);

  void OnCancel() override;
  void OnDone() override;

 protected:
  // The lock of the reactor's state.
  ReactorMutex& mu() const ABSL_LOCK_RETURNED(link_.mu()) { return link_.mu(); }
  const v1::GenerateResponse& collected() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu()) {
    return *response_;
  }
  // Runs under the lock when the engine is done (record().summary is set),
  // before Finish; returns the status to finish with.
  virtual grpc::Status Complete(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu()) {
    return status;
  }

 private:
  void Collect() ABSL_EXCLUSIVE_LOCKS_REQUIRED(link_.mu());

  EngineLink link_;
  std::string request_id_;  // set once, before the engine can produce
  v1::GenerateResponse own_;
  v1::GenerateResponse* const response_ ABSL_PT_GUARDED_BY(link_.mu());
  bool done_ ABSL_GUARDED_BY(link_.mu()) = false;
};

}  // namespace performer::server
